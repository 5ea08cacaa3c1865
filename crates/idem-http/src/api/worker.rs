//! The worker protocol: claim jobs, hold them with heartbeats and finish them, every write
//! carrying the claim's `fence`. A stale fence is 409 `lease_lost` and changes nothing.

use chrono::{DateTime, Utc};
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use idem::{JobError, ProtocolClaim};
use idem_store::{JobState, LeaseToken, StoreError};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::ApiState;
use super::error::{invalid, problem};
use super::extract::{ApiJson, ApiPath};
use super::jobs::visible_job;
use super::scope::filter;
use super::view::JobView;
use crate::principal::Principal;
use crate::problem::Problem;

/// A claim.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    /// The queue (default `default`).
    pub queue: Option<String>,
    /// The kinds this worker can run; only jobs of these kinds are claimed.
    pub kinds: Vec<String>,
    /// At most this many jobs (1–100, default 1).
    pub limit: Option<u32>,
    /// The lease in milliseconds (1000 up to the server's lease, which is the default).
    pub lease_ms: Option<i64>,
    /// The worker's name, recorded as each job's `lease_owner`.
    pub worker: String,
}

/// Claimed jobs; each carries the `fence` its later writes must send.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Claimed {
    /// The jobs (none when nothing waits).
    pub jobs: Vec<JobView>,
}

/// Claim jobs.
#[utoipa::path(post, path = "/v1/claims", tag = "worker", request_body = ClaimRequest,
    responses((status = 200, body = Claimed),
        (status = 422, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn claim(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiJson(request): ApiJson<ClaimRequest>,
) -> Response {
    let claim = ProtocolClaim {
        queue: request
            .queue
            .unwrap_or_else(|| idem::DEFAULT_QUEUE.to_string()),
        kinds: request.kinds,
        limit: request.limit.unwrap_or(1),
        lease_ms: request.lease_ms,
        worker: request.worker,
        principal: filter(&principal),
    };
    match state.protocol.claim(claim).await {
        Ok(jobs) => axum::Json(Claimed {
            jobs: jobs
                .into_iter()
                .map(|j| JobView::of(&principal, j))
                .collect(),
        })
        .into_response(),
        Err(e) => problem(e).rejection(),
    }
}

/// A heartbeat.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    /// The claim's fence.
    pub fence: i64,
    /// The new lease in milliseconds (default: the server's lease).
    pub lease_ms: Option<i64>,
}

/// A lease, extended.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Lease {
    /// The job.
    pub job_id: i64,
    /// The claim's fence.
    pub fence: i64,
    /// When the lease now ends (database clock).
    pub lease_expires_at: DateTime<Utc>,
}

/// Extend a claim's lease.
#[utoipa::path(post, path = "/v1/jobs/{id}/heartbeat", tag = "worker",
    params(("id" = i64, Path, description = "job id")), request_body = HeartbeatRequest,
    responses((status = 200, body = Lease),
        (status = 409, description = "lease_lost: the fence is not the job's current claim", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn heartbeat(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiPath(id): ApiPath<i64>,
    ApiJson(request): ApiJson<HeartbeatRequest>,
) -> Response {
    let lease = match claim_of(&state, &principal, id, request.fence).await {
        Ok(lease) => lease,
        Err(p) => return p.into_response(),
    };
    match state.protocol.heartbeat(lease, request.lease_ms).await {
        Ok(expires) => axum::Json(Lease {
            job_id: id,
            fence: request.fence,
            lease_expires_at: expires,
        })
        .into_response(),
        Err(e) => problem(e).into_response(),
    }
}

/// The claim `fence` of job `id`, once `principal` may see the job (the store judges the
/// fence). An operator sees every job, so its heartbeats and completions go to the
/// store without reading the job first.
async fn claim_of(
    state: &ApiState,
    principal: &Principal,
    id: i64,
    fence: i64,
) -> Result<LeaseToken, Problem> {
    if !principal.is_operator() {
        visible_job(state, principal, id).await?;
    }
    Ok(LeaseToken { job_id: id, fence })
}

/// A completion.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteRequest {
    /// The claim's fence.
    pub fence: i64,
    /// What the job completed with (at most 64 KiB of JSON); a batch's successor reads
    /// its children's.
    #[schema(value_type = Option<Object>)]
    pub result: Option<serde_json::Value>,
}

/// Complete a claimed job.
#[utoipa::path(post, path = "/v1/jobs/{id}/complete", tag = "worker", operation_id = "complete_job",
    params(("id" = i64, Path, description = "job id")), request_body = CompleteRequest,
    responses((status = 200, body = JobView),
        (status = 409, description = "lease_lost", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn complete(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiPath(id): ApiPath<i64>,
    ApiJson(request): ApiJson<CompleteRequest>,
) -> Response {
    let lease = match claim_of(&state, &principal, id, request.fence).await {
        Ok(lease) => lease,
        Err(p) => return p.into_response(),
    };
    match state.protocol.complete(lease, request.result).await {
        Ok(row) => axum::Json(JobView::of(&principal, row)).into_response(),
        Err(e) => problem(e).into_response(),
    }
}

/// A failed attempt.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FailRequest {
    /// The claim's fence.
    pub fence: i64,
    /// What went wrong (kept in the attempt history).
    pub error: String,
    /// `retry` (default: along the ladder, or after `retry_after_ms`), `permanent`
    /// (straight to dead) or `snooze` (run again after `retry_after_ms` without spending
    /// an attempt).
    pub outcome: Option<FailOutcome>,
    /// The delay before the next run instead of the ladder's (clamped to the server's
    /// maximum).
    pub retry_after_ms: Option<u64>,
    /// The intent whose outcome is unknown (or manual) and which the job waits on (this
    /// job's, or another job's that a begin answered `reconcile` for): the job stops
    /// (`dead`, whatever `outcome` says) until the intent is settled, and is then put back
    /// to run, also when it was settled while this attempt ended.
    pub awaits_intent: Option<String>,
}

/// How a failed attempt continues.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailOutcome {
    /// Run again along the ladder.
    Retry,
    /// Dead now.
    Permanent,
    /// Run again later without spending an attempt.
    Snooze,
}

/// Record a failed attempt.
#[utoipa::path(post, path = "/v1/jobs/{id}/fail", tag = "worker", operation_id = "fail_job",
    params(("id" = i64, Path, description = "job id")), request_body = FailRequest,
    responses((status = 200, body = JobView),
        (status = 409, description = "lease_lost", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn fail(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiPath(id): ApiPath<i64>,
    ApiJson(request): ApiJson<FailRequest>,
) -> Response {
    let job = match visible_job(&state, &principal, id).await {
        Ok(job) => job,
        Err(p) => return p.into_response(),
    };
    if job.state != JobState::Running || job.fence != request.fence {
        let lost = StoreError::lease_lost(LeaseToken {
            job_id: id,
            fence: request.fence,
        });
        return problem(lost.into()).into_response();
    }
    let delay = request.retry_after_ms.map(Duration::from_millis);
    let mut error = match (request.outcome.unwrap_or(FailOutcome::Retry), delay) {
        (FailOutcome::Retry, None) => JobError::retry(&request.error),
        (FailOutcome::Retry, Some(d)) => JobError::retry_after(d, &request.error),
        (FailOutcome::Permanent, _) => JobError::permanent(&request.error),
        (FailOutcome::Snooze, Some(d)) => JobError::snooze(d),
        (FailOutcome::Snooze, None) => {
            return invalid("a snooze needs retry_after_ms").rejection();
        }
    };
    if let Some(key) = request.awaits_intent {
        // As a Rust handler's: the job stops (dead) until the intent is settled, and is
        // put back to run by whoever settles it; retrying would only meet the same
        // unknown intent again. The intent may be another job's of the same principal (a
        // begin that met it answers `reconcile`), but its outcome must be unknown or
        // manual: naming a settled one would put the job back at once, a retry past its
        // attempts no client may force.
        let stored = super::scope::store_key(&principal, &key);
        match state.idem.intent(&stored).await {
            Ok(Some(row)) if row.state.awaits_settlement() => {}
            Ok(_) => {
                return invalid(format!(
                    "awaits_intent names {key:?}, which is not an intent whose outcome is \
                     unknown or manual; name the key whose begin answered `reconcile` or \
                     that this job marked unknown"
                ))
                .rejection();
            }
            Err(e) => return problem(e).into_response(),
        }
        error = JobError::permanent(&request.error);
        error.awaits = Some(stored);
    }
    match state.protocol.fail(&job, error).await {
        Ok(row) => axum::Json(JobView::of(&principal, row)).into_response(),
        Err(e) => problem(e).into_response(),
    }
}
