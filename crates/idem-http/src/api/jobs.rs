//! Producers and operators: enqueue, read, retry and cancel jobs.

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use idem::Job;
use idem_store::{JobList, JobRow, JobState};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::ApiState;
use super::error::{invalid, operator_only, problem};
use super::extract::{ApiJson, ApiPath, ApiQuery, parsed};
use super::keyed;
use super::scope::{filter, sees_job, store_key, visible};
use super::view::{EnqueuedView, JobPage, JobView};
use crate::idempotency::Reservation;
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
    params(("Idempotency-Key" = Option<String>, Header, description = "replays the first answer"),
        ("traceparent" = Option<String>, Header, description = "W3C trace context, kept with the job for its attempts' spans to link to")),
    responses(
        (status = 201, description = "enqueued", body = EnqueuedView),
        (status = 200, description = "the enqueue key was taken: the earlier job", body = EnqueuedView),
        (status = 403, description = "the built-in `http` kind is for operators", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "invalid job", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn enqueue(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    reservation: Option<Extension<Reservation>>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<EnqueueRequest>,
) -> Response {
    match job_of(&principal, request) {
        Ok(job) => {
            let job = match traceparent(&headers) {
                Some(tp) => job.trace_parent(tp),
                None => job,
            };
            keyed::write(&state.idem, reservation, job, |e| answer(&principal, e)).await
        }
        Err(p) => p.rejection(),
    }
}

/// The request's W3C `traceparent` header, kept with the job; one that is not a single
/// line of 1–255 printable characters is ignored, as the W3C rules ask.
fn traceparent(headers: &HeaderMap) -> Option<String> {
    let mut values = headers.get_all("traceparent").iter();
    let (value, None) = (values.next()?, values.next()) else {
        return None;
    };
    let value = value.to_str().ok()?;
    let fits = (1..=255).contains(&value.len()) && value.bytes().all(|b| b.is_ascii_graphic());
    fits.then(|| value.to_owned())
}

/// `request` as a job of `principal`, checked as an enqueue checks it: its enqueue key
/// goes in the principal's namespace, and the built-in `http` kind is for operators.
/// Every job the API enqueues (a job, a batch's children and successors) is made here.
pub(super) fn job_of(principal: &Principal, request: EnqueueRequest) -> Result<Job, Problem> {
    if request.kind == BUILTIN_HTTP && !principal.is_operator() {
        // The server would call any URL a client names, from inside its network.
        return Err(operator_only("enqueuing the built-in `http` kind"));
    }
    let args = request.args.unwrap_or_else(|| serde_json::json!({}));
    let mut job = Job::new(request.kind, args).principal(principal.name());
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
        job = job.enqueue_key(namespaced_key(principal, &key)?);
    }
    job.validate().map_err(problem)?;
    Ok(job)
}

/// `key` in `principal`'s namespace, refused when that makes it too long to store.
fn namespaced_key(principal: &Principal, key: &str) -> Result<String, Problem> {
    let stored = store_key(principal, key);
    let room = 255 - (stored.len() - key.len());
    if key.is_empty() || key.len() > room {
        return Err(invalid(format!(
            "enqueue_key must be 1 to {room} characters for this principal (its keys \
             are stored in a namespace of their own)"
        )));
    }
    Ok(stored)
}

/// The status and JSON body of an enqueue's answer.
fn answer(principal: &Principal, enqueued: idem::Enqueued) -> (StatusCode, Vec<u8>) {
    let status = match enqueued.deduplicated {
        true => StatusCode::OK,
        false => StatusCode::CREATED,
    };
    let view = EnqueuedView::of(principal, enqueued);
    (status, serde_json::to_vec(&view).expect("a view encodes"))
}

/// The job `id` if `principal` may see it.
pub(super) async fn visible_job(
    state: &ApiState,
    principal: &Principal,
    id: i64,
) -> Result<JobRow, Problem> {
    let found = state.idem.job(id).await;
    visible(found, |job| sees_job(principal, job), &format!("job {id}"))
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
    let job_state = match parsed::<JobState>(query.state.as_deref()) {
        Ok(s) => s,
        Err(p) => return p.into_response(),
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
        Ok(jobs) => axum::Json(JobPage::of(&principal, jobs, limit)).into_response(),
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
