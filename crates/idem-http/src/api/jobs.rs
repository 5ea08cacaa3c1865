//! Producers and operators: enqueue, read, retry and cancel jobs.

use axum::Extension;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use idem::Job;
use idem_store::{JobList, JobRow, JobState};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::ApiState;
use super::error::{invalid, not_found, operator_only, problem};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::scope::{filter, sees_job, store_key};
use super::view::{EnqueuedView, JobPage, JobView};
use crate::idempotency::{AnswerStored, Reservation};
use crate::principal::Principal;
use crate::problem::Problem;

/// The kind of the built-in `http` job, which only operators may enqueue.
const BUILTIN_HTTP: &str = <idem::builtin::Http as idem::Handler>::KIND;

/// A job to enqueue.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnqueueRequest {
    /// The queue (default `default`).
    pub queue: Option<String>,
    /// The handler name.
    pub kind: String,
    /// The handler's arguments (default `{}`).
    #[schema(value_type = Option<Object>)]
    pub args: Option<serde_json::Value>,
    /// Not before this time.
    pub run_at: Option<DateTime<Utc>>,
    /// Lower numbers are claimed first (default 0).
    pub priority: Option<i16>,
    /// Attempts allowed.
    pub max_attempts: Option<i32>,
    /// Makes the enqueue idempotent per queue: inside the window, the same key returns
    /// the first job with `deduplicated: true`.
    pub enqueue_key: Option<String>,
}

/// Enqueue a job.
#[utoipa::path(post, path = "/v1/jobs", tag = "jobs", request_body = EnqueueRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "replays the first answer")),
    responses(
        (status = 201, description = "enqueued", body = EnqueuedView),
        (status = 200, description = "the enqueue key was taken: the earlier job", body = EnqueuedView),
        (status = 422, description = "invalid job", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn enqueue(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    reservation: Option<Extension<Reservation>>,
    ApiJson(request): ApiJson<EnqueueRequest>,
) -> Response {
    if request.kind == BUILTIN_HTTP && !principal.is_operator() {
        // The server would call any URL a client names, from inside its network.
        return operator_only("enqueuing the built-in `http` kind").rejection();
    }
    let mut job = Job::new(request.kind, request.args.unwrap_or(serde_json::json!({})))
        .principal(principal.name());
    if let Some(queue) = request.queue {
        job = job.queue(queue);
    }
    if let Some(at) = request.run_at {
        job = job.run_at(at);
    }
    if let Some(p) = request.priority {
        job = job.priority(p);
    }
    if let Some(n) = request.max_attempts {
        job = job.max_attempts(n);
    }
    if let Some(key) = request.enqueue_key {
        let stored = store_key(&principal, &key);
        let room = 255 - (stored.len() - key.len());
        if key.is_empty() || key.len() > room {
            return invalid(format!(
                "enqueue_key must be 1 to {room} characters for this principal (its keys \
                 are stored in a namespace of their own)"
            ))
            .rejection();
        }
        job = job.enqueue_key(stored);
    }
    if let Err(e) = job.validate() {
        return problem(e).rejection();
    }
    let answered = match reservation {
        Some(Extension(r)) => enqueue_keyed(&state, &principal, job, &r).await,
        None => match state.idem.enqueue(job).await {
            Ok(enqueued) => {
                let (status, body) = answer(&principal, enqueued);
                Ok(json_response(status, body))
            }
            Err(e) => Err(e),
        },
    };
    answered.unwrap_or_else(|e| problem(e).into_response())
}

/// The status and JSON body of an enqueue's answer.
fn answer(principal: &Principal, enqueued: idem::Enqueued) -> (StatusCode, Vec<u8>) {
    let status = match enqueued.deduplicated {
        true => StatusCode::OK,
        false => StatusCode::CREATED,
    };
    let mut job = JobView::of(principal, enqueued.job);
    job.args = None;
    let view = EnqueuedView {
        deduplicated: enqueued.deduplicated,
        job,
    };
    (status, serde_json::to_vec(&view).expect("a view encodes"))
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// An enqueue under an Idempotency-Key: the job and the key's answer commit in one
/// transaction, so the layer writes nothing after the handler and no job exists whose
/// answer was not stored.
async fn enqueue_keyed(
    state: &ApiState,
    principal: &Principal,
    job: Job,
    reservation: &Reservation,
) -> Result<Response, idem::IdemError> {
    let mut tx = state.idem.begin().await?;
    let enqueued = state.idem.enqueue_tx(&mut tx, job).await?;
    let (status, body) = answer(principal, enqueued);
    let stored = reservation.complete(
        status.as_u16(),
        &[("content-type", "application/json")],
        body.clone(),
    );
    if !tx.store_tx().http_key_complete(stored).await? {
        tx.rollback().await?;
        return Ok(Problem::new(
            StatusCode::CONFLICT,
            "idempotency_key_in_flight",
            "this request's hold on its Idempotency-Key lapsed and another request took              it; nothing was enqueued here: repeat the request to get that one's answer",
        )
        .retry_after(1)
        .rejection());
    }
    tx.commit().await?;
    let mut response = json_response(status, body);
    response.extensions_mut().insert(AnswerStored);
    Ok(response)
}

/// The job `id` if `principal` may see it.
pub(super) async fn visible_job(
    state: &ApiState,
    principal: &Principal,
    id: i64,
) -> Result<JobRow, Problem> {
    match state.idem.job(id).await {
        Ok(Some(job)) if sees_job(principal, &job) => Ok(job),
        Ok(_) => Err(not_found(&format!("job {id}"))),
        Err(e) => Err(problem(e)),
    }
}

/// One job.
#[utoipa::path(get, path = "/v1/jobs/{id}", tag = "jobs", operation_id = "get_job",
    params(("id" = i64, Path, description = "job id")),
    responses((status = 200, body = JobView),
        (status = 404, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn get(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiPath(id): ApiPath<i64>,
) -> Response {
    match visible_job(&state, &principal, id).await {
        Ok(job) => axum::Json(JobView::of(&principal, job)).into_response(),
        Err(p) => p.into_response(),
    }
}

/// Filters and paging of a job listing.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only this state.
    pub state: Option<String>,
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this kind.
    pub kind: Option<String>,
    /// At most this many (1–500, default 50).
    pub limit: Option<u32>,
    /// Jobs with ids below this one (the previous page's `next`).
    pub after: Option<i64>,
}

/// Jobs, newest first.
#[utoipa::path(get, path = "/v1/jobs", tag = "jobs", operation_id = "list_jobs", params(ListQuery),
    responses((status = 200, body = JobPage),
        (status = 422, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Response {
    let limit = match state.settings.page(query.limit) {
        Ok(l) => l,
        Err(p) => return p.into_response(),
    };
    let job_state = match query
        .state
        .as_deref()
        .map(str::parse::<JobState>)
        .transpose()
    {
        Ok(s) => s,
        Err(e) => return invalid(e.to_string()).into_response(),
    };
    let params = JobList {
        state: job_state,
        queue: query.queue,
        kind: query.kind,
        principal: filter(&principal),
        before_id: query.after,
        limit: limit + 1,
    };
    match state.idem.jobs(params).await {
        Ok(mut jobs) => {
            let next = (jobs.len() > limit as usize).then(|| {
                jobs.truncate(limit as usize);
                jobs.last().map(|j| j.id)
            });
            let page = JobPage {
                jobs: jobs
                    .into_iter()
                    .map(|j| JobView::of(&principal, j))
                    .collect(),
                next: next.flatten(),
            };
            axum::Json(page).into_response()
        }
        Err(e) => problem(e).into_response(),
    }
}

/// How to retry.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RetryQuery {
    /// Retry even when a new retry horizon could outlive the job's effect keys
    /// (operators only).
    #[serde(default)]
    pub force: bool,
}

/// Put a dead or cancelled job back to run, with a fresh ladder.
#[utoipa::path(post, path = "/v1/jobs/{id}/retry", tag = "jobs",
    params(("id" = i64, Path, description = "job id"), RetryQuery),
    responses((status = 200, body = JobView),
        (status = 409, description = "not dead or cancelled, or refused past the effect-key window", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn retry(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(query): ApiQuery<RetryQuery>,
) -> Response {
    let force = query.force;
    if force && !principal.is_operator() {
        return operator_only("a forced retry").rejection();
    }
    let job = match visible_job(&state, &principal, id).await {
        Ok(job) => job,
        Err(p) => return p.into_response(),
    };
    let retried = if force {
        state.idem.retry_jobs_forced(vec![id]).await
    } else {
        state.idem.retry_jobs(vec![id]).await
    };
    match retried {
        Ok(rows) => match rows.into_iter().next() {
            Some(row) => axum::Json(JobView::of(&principal, row)).into_response(),
            None => Problem::new(
                StatusCode::CONFLICT,
                "not_retryable",
                format!(
                    "job {id} is {}; only dead or cancelled jobs are retried",
                    job.state
                ),
            )
            .into_response(),
        },
        Err(e) => problem(e).into_response(),
    }
}

/// Cancel an unfinished job.
#[utoipa::path(post, path = "/v1/jobs/{id}/cancel", tag = "jobs",
    params(("id" = i64, Path, description = "job id")),
    responses((status = 200, body = JobView),
        (status = 409, description = "already finished", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn cancel(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiPath(id): ApiPath<i64>,
) -> Response {
    if let Err(p) = visible_job(&state, &principal, id).await {
        return p.into_response();
    }
    match state.idem.cancel(id).await {
        Ok(row) => axum::Json(JobView::of(&principal, row)).into_response(),
        Err(e) => problem(e).into_response(),
    }
}
