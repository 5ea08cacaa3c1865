//! The intent protocol for workers in any language: reserve a remote call's intent
//! under a job's claim, hold it, and record how the call ended, under the intent's own
//! fence, with the rules a Rust handler follows (`idem_store::intent`): a keyed intent
//! whose holder's lease ended is taken over and sent again with the same key; an
//! unkeyed one goes to `unknown` and reconciliation, never a blind re-send. Also the
//! reconciliation queue, and settling an intent by hand.

use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use idem_store::{
    IntentBegin, IntentBegun, IntentFinish, IntentList, IntentOutcome, IntentRenew,
    IntentResolution, IntentRow, IntentState, IntentToken, LeaseToken,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::ApiState;
use super::error::{invalid, not_found, operator_only, problem};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::jobs::visible_job;
use super::scope::{filter, sees_intent, store_key};
use super::view::IntentView;
use crate::principal::Principal;
use crate::problem::Problem;

/// The longest lease an intent may ask for.
pub const MAX_INTENT_LEASE: Duration = Duration::from_secs(600);

/// A reservation of a call's intent.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BeginRequest {
    /// The job whose claim makes the call.
    pub job_id: i64,
    /// That claim's fence.
    pub fence: i64,
    /// The request the call sends (any JSON: method, URL, body …); its digest is the
    /// intent's fingerprint, and the same key with another request is refused.
    #[schema(value_type = Object)]
    pub request: serde_json::Value,
    /// Whether the remote ignores idempotency keys (an unkeyed call).
    #[serde(default)]
    pub unkeyed: bool,
    /// The holder's lease in milliseconds (1000–600000): longer than the call's timeout
    /// times its tries.
    pub lease_ms: i64,
}

/// What a begin allows.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BeginOutcome {
    /// You hold it: make the call (with the key as its idempotency key when keyed),
    /// then record the outcome under `intent.fence`.
    Begun,
    /// Another holder's lease is live: do not call; try again after it ends.
    InProgress,
    /// Applied already: do not call; `intent.result` is the result.
    Completed,
    /// Refused for good by the remote: do not call.
    Failed,
    /// The outcome is not known: do not call; reconciliation decides. Fail the job with
    /// `awaits_intent` set to this key.
    Reconcile,
}

/// The answer to a begin.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Begun {
    /// What you may do.
    pub outcome: BeginOutcome,
    /// The intent.
    pub intent: IntentView,
}

/// Reserve a call's intent.
#[utoipa::path(post, path = "/v1/intents/{key}/begin", tag = "intents",
    params(("key" = String, Path, description = "the logical request's key")),
    request_body = BeginRequest,
    responses((status = 200, body = Begun),
        (status = 409, description = "lease_lost: the job's claim is not current", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "intent_mismatch: the key is held for another request", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn begin(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiPath(key): ApiPath<String>,
    ApiJson(request): ApiJson<BeginRequest>,
) -> Response {
    if let Err(p) = check_key(&key).and(lease(request.lease_ms)) {
        return p.rejection();
    }
    if let Err(p) = visible_job(&state, &principal, request.job_id).await {
        return p.into_response();
    }
    let fingerprint = match idem::intent::fingerprint(&request.request) {
        Ok(f) => f,
        Err(e) => return problem(e).rejection(),
    };
    let params = IntentBegin {
        key: store_key(&principal, &key),
        fingerprint,
        unkeyed: request.unkeyed,
        lease_ms: request.lease_ms,
        job: LeaseToken {
            job_id: request.job_id,
            fence: request.fence,
        },
        now: state.idem.clock().now(),
    };
    let begun = match state.idem.store().intent_begin(params).await {
        Ok(b) => b,
        Err(e) => return problem(e.into()).into_response(),
    };
    let outcome = match &begun {
        IntentBegun::Begun(_) => BeginOutcome::Begun,
        IntentBegun::InProgress(_) => BeginOutcome::InProgress,
        IntentBegun::Completed(_) => BeginOutcome::Completed,
        IntentBegun::Failed(_) => BeginOutcome::Failed,
        IntentBegun::Reconcile(_) => BeginOutcome::Reconcile,
        IntentBegun::Mismatch(row) => {
            return problem(idem::IdemError::IntentMismatch {
                key: key.clone(),
                stored: row.fingerprint.clone(),
                given: "this request's".into(),
            })
            .rejection();
        }
    };
    let row = begun.row().clone();
    axum::Json(Begun {
        outcome,
        intent: IntentView::of(&principal, row),
    })
    .into_response()
}

fn check_key(key: &str) -> Result<(), Problem> {
    if key.is_empty() || key.len() > 255 || key.chars().any(|c| c.is_control()) {
        return Err(invalid(
            "an intent key is 1 to 255 characters without control characters",
        ));
    }
    Ok(())
}

fn lease(ms: i64) -> Result<(), Problem> {
    let max = MAX_INTENT_LEASE.as_millis() as i64;
    if !(idem::MIN_LEASE_MS..=max).contains(&ms) {
        return Err(invalid(format!("lease_ms {ms} is outside 1000..={max}")));
    }
    Ok(())
}

/// The intent `key` if `principal` may see it: for a client, the intent it named (in
/// its namespace), or, when `also_of_its_jobs`, an intent of one of its jobs named by
/// idem itself (the built-in `http` kind's, outside any namespace). Writes take only the
/// first: a client holds and finishes only the intents it began.
async fn visible_intent(
    state: &ApiState,
    principal: &Principal,
    key: &str,
    also_of_its_jobs: bool,
) -> Result<IntentRow, Problem> {
    let hidden = || not_found(&format!("intent {key:?}"));
    let stored = store_key(principal, key);
    let mut row = state.idem.intent(&stored).await.map_err(problem)?;
    if row.is_none() && also_of_its_jobs && stored != key {
        row = state.idem.intent(key).await.map_err(problem)?;
    }
    let Some(row) = row else {
        return Err(hidden());
    };
    if principal.is_operator() {
        return Ok(row);
    }
    let job = state.idem.job(row.job_id).await.map_err(problem)?;
    if sees_intent(principal, &row, job.as_ref()) {
        Ok(row)
    } else {
        Err(hidden())
    }
}

/// A holder's lease renewal.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenewRequest {
    /// The intent's fence from the begin.
    pub fence: i64,
    /// The new lease in milliseconds (1000–600000).
    pub lease_ms: i64,
}

/// Extend a holder's lease (renew just before sending, to confirm you still hold it).
#[utoipa::path(post, path = "/v1/intents/{key}/renew", tag = "intents",
    params(("key" = String, Path)), request_body = RenewRequest,
    responses((status = 200, body = IntentView),
        (status = 409, description = "intent_lost", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn renew(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiPath(key): ApiPath<String>,
    ApiJson(request): ApiJson<RenewRequest>,
) -> Response {
    if let Err(p) = lease(request.lease_ms) {
        return p.rejection();
    }
    let row = match visible_intent(&state, &principal, &key, false).await {
        Ok(row) => row,
        Err(p) => return p.into_response(),
    };
    let params = IntentRenew {
        token: IntentToken {
            key: row.key,
            fence: request.fence,
        },
        lease_ms: request.lease_ms,
        now: state.idem.clock().now(),
    };
    match state.idem.store().intent_renew(params).await {
        Ok(row) => axum::Json(IntentView::of(&principal, row)).into_response(),
        Err(e) => problem(e.into()).into_response(),
    }
}

/// A completed call.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteIntentRequest {
    /// The intent's fence from the begin.
    pub fence: i64,
    /// The result every later begin of the key gets (default `null`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub result: serde_json::Value,
    /// The remote's ids for the effect.
    #[serde(default)]
    pub remote_refs: Vec<String>,
}

/// A call that ended without being applied for sure.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorIntentRequest {
    /// The intent's fence from the begin.
    pub fence: i64,
    /// What happened.
    pub error: String,
}

/// A call that certainly never left.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseIntentRequest {
    /// The intent's fence from the begin.
    pub fence: i64,
}

/// Record that the call was applied.
#[utoipa::path(post, path = "/v1/intents/{key}/complete", tag = "intents", operation_id = "complete_intent",
    params(("key" = String, Path)), request_body = CompleteIntentRequest,
    responses((status = 200, body = IntentView),
        (status = 409, description = "intent_lost", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn complete(
    state: State<ApiState>,
    principal: Extension<Principal>,
    ApiPath(key): ApiPath<String>,
    ApiJson(request): ApiJson<CompleteIntentRequest>,
) -> Response {
    let outcome = IntentOutcome::Completed {
        result: request.result,
        remote_refs: request.remote_refs,
    };
    finish(state, principal, key, request.fence, outcome).await
}

/// Record that the remote refused the call for good (not applied).
#[utoipa::path(post, path = "/v1/intents/{key}/fail", tag = "intents", operation_id = "fail_intent",
    params(("key" = String, Path)), request_body = ErrorIntentRequest,
    responses((status = 200, body = IntentView),
        (status = 409, description = "intent_lost", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn fail(
    state: State<ApiState>,
    principal: Extension<Principal>,
    ApiPath(key): ApiPath<String>,
    ApiJson(request): ApiJson<ErrorIntentRequest>,
) -> Response {
    let outcome = IntentOutcome::Failed {
        error: request.error,
    };
    finish(state, principal, key, request.fence, outcome).await
}

/// Record that the call may or may not have been applied: reconciliation decides.
#[utoipa::path(post, path = "/v1/intents/{key}/unknown", tag = "intents",
    params(("key" = String, Path)), request_body = ErrorIntentRequest,
    responses((status = 200, body = IntentView),
        (status = 409, description = "intent_lost", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn unknown(
    state: State<ApiState>,
    principal: Extension<Principal>,
    ApiPath(key): ApiPath<String>,
    ApiJson(request): ApiJson<ErrorIntentRequest>,
) -> Response {
    let outcome = IntentOutcome::Unknown {
        error: request.error,
    };
    finish(state, principal, key, request.fence, outcome).await
}

/// Record that the call certainly never left: the next begin takes the intent.
#[utoipa::path(post, path = "/v1/intents/{key}/release", tag = "intents",
    params(("key" = String, Path)), request_body = ReleaseIntentRequest,
    responses((status = 200, body = IntentView),
        (status = 409, description = "intent_lost", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn release(
    state: State<ApiState>,
    principal: Extension<Principal>,
    ApiPath(key): ApiPath<String>,
    ApiJson(request): ApiJson<ReleaseIntentRequest>,
) -> Response {
    finish(
        state,
        principal,
        key,
        request.fence,
        IntentOutcome::Released,
    )
    .await
}

async fn finish(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    key: String,
    fence: i64,
    outcome: IntentOutcome,
) -> Response {
    let row = match visible_intent(&state, &principal, &key, false).await {
        Ok(row) => row,
        Err(p) => return p.into_response(),
    };
    let params = IntentFinish {
        token: IntentToken {
            key: row.key,
            fence,
        },
        outcome,
        now: state.idem.clock().now(),
    };
    match state.idem.store().intent_finish(params).await {
        Ok(row) => axum::Json(IntentView::of(&principal, row)).into_response(),
        Err(e) => problem(e.into()).into_response(),
    }
}

/// Filters and paging of an intent listing.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct IntentQuery {
    /// Only this state (e.g. `unknown`: the reconciliation queue).
    pub state: Option<String>,
    /// At most this many (1–500, default 50).
    pub limit: Option<u32>,
    /// The previous page's `next` (an opaque cursor).
    pub after: Option<String>,
}

/// A page of intents, in key order.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct IntentPage {
    /// The intents.
    pub intents: Vec<IntentView>,
    /// Pass as `after` for the next page (an opaque cursor); absent on the last page.
    pub next: Option<String>,
}

/// Intents (the reconciliation queue with `state=unknown`).
#[utoipa::path(get, path = "/v1/intents", tag = "intents", operation_id = "list_intents", params(IntentQuery),
    responses((status = 200, body = IntentPage)), security(("bearer" = [])))]
pub async fn list(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiQuery(query): ApiQuery<IntentQuery>,
) -> Response {
    let limit = match state.settings.page(query.limit) {
        Ok(l) => l,
        Err(p) => return p.into_response(),
    };
    let states = match query.state.as_deref().map(IntentState::parse).transpose() {
        Ok(s) => s.into_iter().collect(),
        Err(e) => return invalid(e.to_string()).into_response(),
    };
    let params = IntentList {
        states,
        principal: filter(&principal),
        after: query.after,
        limit: limit + 1,
        ..IntentList::default()
    };
    match state.idem.intents(params).await {
        Ok(mut rows) => {
            let more = rows.len() > limit as usize;
            rows.truncate(limit as usize);
            let next = more.then(|| rows.last().map(|r| r.key.clone())).flatten();
            axum::Json(IntentPage {
                intents: rows
                    .into_iter()
                    .map(|r| IntentView::of(&principal, r))
                    .collect(),
                next,
            })
            .into_response()
        }
        Err(e) => problem(e).into_response(),
    }
}

/// One intent.
#[utoipa::path(get, path = "/v1/intents/{key}", tag = "intents", operation_id = "get_intent",
    params(("key" = String, Path)),
    responses((status = 200, body = IntentView),
        (status = 404, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn get(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiPath(key): ApiPath<String>,
) -> Response {
    match visible_intent(&state, &principal, &key, true).await {
        Ok(row) => axum::Json(IntentView::of(&principal, row)).into_response(),
        Err(p) => p.into_response(),
    }
}

/// How an operator settles an unknown or manual intent.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case", tag = "resolution")]
pub enum ResolveRequest {
    /// The remote applied it: completed, with its ids.
    Applied {
        /// The remote's ids.
        #[serde(default)]
        remote_refs: Vec<String>,
        /// The result to store (default `null`).
        #[serde(default)]
        #[schema(value_type = Option<Object>)]
        result: serde_json::Value,
    },
    /// The remote does not have it: released, and the job sends it again.
    Absent,
}

/// The answer to a resolve.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Resolved {
    /// The intent as settled.
    pub intent: IntentView,
    /// Whether its job was put back to run.
    pub job_retried: bool,
}

/// Settle an unknown or manual intent by hand (operators only; `idem intents resolve`).
#[utoipa::path(post, path = "/v1/intents/{key}/resolve", tag = "intents",
    params(("key" = String, Path)), request_body = ResolveRequest,
    responses((status = 200, body = Resolved),
        (status = 403, body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "not unknown or manual", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn resolve(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiPath(key): ApiPath<String>,
    ApiJson(request): ApiJson<ResolveRequest>,
) -> Response {
    if !principal.is_operator() {
        return operator_only("settling an intent by hand").rejection();
    }
    let resolution = match request {
        ResolveRequest::Applied {
            remote_refs,
            result,
        } => IntentResolution::Applied {
            result,
            remote_refs,
        },
        ResolveRequest::Absent => IntentResolution::Absent,
    };
    match state.idem.resolve_intent(&key, resolution).await {
        Ok((row, job_retried)) => axum::Json(Resolved {
            intent: IntentView::of(&principal, row),
            job_retried,
        })
        .into_response(),
        Err(e) => problem(e).into_response(),
    }
}
