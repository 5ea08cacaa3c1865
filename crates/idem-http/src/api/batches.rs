//! Batches: N child jobs and a successor, which the change that finishes the last child
//! enqueues (`idem::Batch`); create, add to, seal and read them.
//!
//! What must stay true:
//! - every job of a batch (children, successor, failure successor) is made by
//!   [`job_of`], as `POST /v1/jobs` makes its job: the caller's principal and enqueue-key
//!   namespace, the built-in `http` kind for operators only;
//! - a batch belongs to the principal that created it: a client principal sees and acts
//!   on its own batches only, and another's are 404, as if they did not exist;
//! - a creation under an Idempotency-Key stores its answer in the creation's own
//!   transaction, so no batch exists whose answer was not stored;
//! - one request adds at most [`idem::MAX_CHILDREN_PER_CALL`] children, inside the
//!   server's body limit (1 MiB by default: 10,000 children of small args fit).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Extension, Json};
use idem::{Batch, Job, MAX_CHILDREN_PER_CALL};
use idem_store::{BatchList, BatchRow, BatchState};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::ApiState;
use super::error::{invalid, problem};
use super::extract::{ApiJson, ApiPath, ApiQuery, parsed};
use super::jobs::{EnqueueRequest, job_of};
use super::keyed;
use super::scope::{filter, sees_batch, visible};
use super::view::{BatchAddedView, BatchPage, BatchView, JobPage};
use crate::idempotency::Reservation;
use crate::principal::Principal;
use crate::problem::Problem;

/// A batch to create.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// The job enqueued once every child finished (completed, dead or cancelled). It
    /// takes no `enqueue_key`: it is enqueued with `batch:{id}:done`, once per batch.
    pub successor: EnqueueRequest,
    /// The job enqueued instead of the successor when any child is dead (no
    /// `enqueue_key` either).
    pub on_dead: Option<EnqueueRequest>,
    /// The first children: at most 10,000 per request, inside the server's body limit.
    pub children: Vec<EnqueueRequest>,
    /// Keep the batch open for more children (`POST /v1/batches/{id}/children`) until
    /// it is sealed (`POST /v1/batches/{id}/seal`). Default false: sealed at once, and a
    /// batch without children finishes at once.
    #[serde(default)]
    pub open: bool,
}

/// Children to add to an open batch.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChildrenRequest {
    /// The children: 1 to 10,000 per request, inside the server's body limit.
    pub children: Vec<EnqueueRequest>,
}

/// Create a batch.
#[utoipa::path(post, path = "/v1/batches", tag = "batches", operation_id = "create_batch",
    request_body = BatchRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "replays the first answer")),
    responses(
        (status = 201, description = "created, with its children", body = BatchAddedView),
        (status = 403, description = "the built-in `http` kind is for operators", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "an invalid job, a successor with an enqueue key, or more than 10,000 children", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn create(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    reservation: Option<Extension<Reservation>>,
    ApiJson(request): ApiJson<BatchRequest>,
) -> Response {
    let batch = match batch_of(&principal, request) {
        Ok(batch) => batch,
        Err(p) => return p.rejection(),
    };
    let created = |added| (StatusCode::CREATED, answer(&principal, added));
    keyed::write(&state.idem, reservation, batch, created).await
}

/// `request` as a batch of `principal`.
fn batch_of(principal: &Principal, request: BatchRequest) -> Result<Batch, Problem> {
    let children = jobs_of(principal, request.children)?;
    let successor = job_of(principal, request.successor).map_err(|p| at("successor", p))?;
    let mut batch = Batch::new(successor)
        .children(children)
        .principal(principal.name());
    if let Some(on_dead) = request.on_dead {
        batch = batch.on_dead(job_of(principal, on_dead).map_err(|p| at("on_dead", p))?);
    }
    if request.open {
        batch = batch.open();
    }
    Ok(batch)
}

/// `requests` as children of `principal`, at most [`MAX_CHILDREN_PER_CALL`]; a refusal
/// names the child.
fn jobs_of(principal: &Principal, requests: Vec<EnqueueRequest>) -> Result<Vec<Job>, Problem> {
    if requests.len() > MAX_CHILDREN_PER_CALL {
        return Err(invalid(format!(
            "{} children in one request; add at most {MAX_CHILDREN_PER_CALL} at a time \
             (create the batch with `open: true`, add the rest with \
             POST /v1/batches/{{id}}/children, then POST /v1/batches/{{id}}/seal)",
            requests.len()
        )));
    }
    let jobs = requests.into_iter().enumerate();
    jobs.map(|(i, r)| job_of(principal, r).map_err(|p| at(&format!("children[{i}]"), p)))
        .collect()
}

/// `p` with its detail prefixed by the field it is about.
fn at(field: &str, mut p: Problem) -> Problem {
    p.detail = format!("{field}: {}", p.detail);
    p
}

/// The JSON body of a batch and the children a request added.
fn answer(principal: &Principal, added: idem::BatchAdded) -> Vec<u8> {
    serde_json::to_vec(&BatchAddedView::of(principal, added)).expect("a view encodes")
}

/// The batch `id` if `principal` may see it.
async fn visible_batch(
    state: &ApiState,
    principal: &Principal,
    id: i64,
) -> Result<BatchRow, Problem> {
    let found = state.idem.batch_get(id).await;
    visible(found, |b| sees_batch(principal, b), &format!("batch {id}"))
}

/// Add children to an open batch. Under an Idempotency-Key the children and the stored
/// answer commit together.
#[utoipa::path(post, path = "/v1/batches/{id}/children", tag = "batches",
    operation_id = "add_batch_children", request_body = ChildrenRequest,
    params(("id" = i64, Path, description = "batch id"),
        ("Idempotency-Key" = Option<String>, Header, description = "replays the first answer")),
    responses(
        (status = 200, description = "added", body = BatchAddedView),
        (status = 403, description = "the built-in `http` kind is for operators", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "the batch is sealed or finished (the detail names its state)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "an invalid job, no children, or more than 10,000", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn add(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    reservation: Option<Extension<Reservation>>,
    ApiPath(id): ApiPath<i64>,
    ApiJson(request): ApiJson<ChildrenRequest>,
) -> Result<Response, Problem> {
    if request.children.is_empty() {
        return Err(invalid("children is empty: nothing to add"));
    }
    let children = jobs_of(&principal, request.children)?;
    visible_batch(&state, &principal, id).await?;
    let write = keyed::AddChildren {
        batch_id: id,
        children,
    };
    let added = |added| (StatusCode::OK, answer(&principal, added));
    Ok(keyed::write(&state.idem, reservation, write, added).await)
}

/// Seal a batch: no more children; when every child already finished (or it has none),
/// its successor is enqueued now. Sealing a sealed or finished batch changes nothing.
#[utoipa::path(post, path = "/v1/batches/{id}/seal", tag = "batches", operation_id = "seal_batch",
    params(("id" = i64, Path, description = "batch id"),
        ("Idempotency-Key" = Option<String>, Header, description = "replays the first answer")),
    responses((status = 200, description = "sealed (or already sealed or finished)", body = BatchView)),
    security(("bearer" = [])))]
pub async fn seal(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<BatchView>, Problem> {
    visible_batch(&state, &principal, id).await?;
    let row = state.idem.batch_seal(id).await.map_err(problem)?;
    Ok(Json(BatchView::of(row)))
}

/// One batch, with its children counted by state.
#[utoipa::path(get, path = "/v1/batches/{id}", tag = "batches", operation_id = "get_batch",
    params(("id" = i64, Path, description = "batch id")),
    responses((status = 200, body = BatchView)),
    security(("bearer" = [])))]
pub async fn get(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<BatchView>, Problem> {
    let found = state.idem.batch_status(id).await;
    let sees = |s: &idem::BatchStatus| sees_batch(&principal, &s.batch);
    let status = visible(found, sees, &format!("batch {id}"))?;
    Ok(Json(BatchView::with_states(status)))
}

/// Filters and paging of a batch listing.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct BatchListQuery {
    /// Only this state: open, sealed or finished.
    pub state: Option<String>,
    /// Batches with ids below this one (the previous page's `next`).
    pub before: Option<i64>,
    /// At most this many (1–500, default 50).
    pub limit: Option<u32>,
}

/// Batches, newest first (a client principal's own; an operator's, everyone's).
#[utoipa::path(get, path = "/v1/batches", tag = "batches", operation_id = "list_batches",
    params(BatchListQuery),
    responses((status = 200, body = BatchPage)),
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiQuery(query): ApiQuery<BatchListQuery>,
) -> Result<Json<BatchPage>, Problem> {
    let limit = state.settings.page(query.limit)?;
    let params = BatchList {
        state: parsed::<BatchState>(query.state.as_deref())?,
        principal: filter(&principal),
        before_id: query.before,
        limit: limit + 1,
    };
    let rows = state.idem.batches(params).await.map_err(problem)?;
    Ok(Json(BatchPage::of(rows, limit)))
}

/// Paging of a batch's children.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ChildrenQuery {
    /// Children with ids above this one (the previous page's `next`).
    pub after: Option<i64>,
    /// At most this many (1–500, default 50).
    pub limit: Option<u32>,
}

/// A batch's children, oldest first, with their states, results and errors.
#[utoipa::path(get, path = "/v1/batches/{id}/children", tag = "batches",
    operation_id = "list_batch_children",
    params(("id" = i64, Path, description = "batch id"), ChildrenQuery),
    responses((status = 200, body = JobPage)),
    security(("bearer" = [])))]
pub async fn children(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(query): ApiQuery<ChildrenQuery>,
) -> Result<Json<JobPage>, Problem> {
    let limit = state.settings.page(query.limit)?;
    visible_batch(&state, &principal, id).await?;
    let page = state.idem.batch_children(id, query.after, limit + 1).await;
    Ok(Json(JobPage::of(&principal, page.map_err(problem)?, limit)))
}
