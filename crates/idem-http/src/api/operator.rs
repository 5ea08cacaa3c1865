//! Operator actions that mirror the CLI's (`idem jobs show`, `idem dead discard`,
//! `idem reconcile`, `idem purge`, `idem ledger verify|repair`), so every operator action
//! has its endpoint and its command.

use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use idem::intent::ReconcileOptions;
use idem_store::{AttemptRow, PurgeTarget};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::ApiState;
use super::error::{operator_only, problem};
use super::extract::{ApiJson, ApiPath};
use super::jobs::visible_job;
use crate::principal::Principal;
use crate::problem::Problem;

/// One finished attempt.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AttemptView {
    /// Attempt number (1-based).
    pub attempt: i32,
    /// The fence it ran under.
    pub fence: i64,
    /// completed, retryable, dead, lease_expired, cancelled or snoozed.
    pub outcome: String,
    /// The error, for failed attempts.
    pub error: Option<String>,
    /// When it started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it was recorded as finished.
    pub finished_at: DateTime<Utc>,
}

impl From<AttemptRow> for AttemptView {
    fn from(a: AttemptRow) -> Self {
        AttemptView {
            attempt: a.attempt,
            fence: a.fence,
            outcome: a.outcome.as_str().to_string(),
            error: a.error,
            started_at: a.started_at,
            finished_at: a.finished_at,
        }
    }
}

/// A job's attempt history.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Attempts {
    /// Every finished attempt, oldest first.
    pub attempts: Vec<AttemptView>,
}

/// A job's attempt history: each attempt's fence, outcome and error (`idem jobs show`).
#[utoipa::path(get, path = "/v1/jobs/{id}/attempts", tag = "jobs",
    params(("id" = i64, Path, description = "job id")),
    responses((status = 200, body = Attempts),
        (status = 404, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn attempts(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiPath(id): ApiPath<i64>,
) -> Response {
    if let Err(p) = visible_job(&state, &principal, id).await {
        return p.into_response();
    }
    match state.idem.attempts(id).await {
        Ok(rows) => axum::Json(Attempts {
            attempts: rows.into_iter().map(Into::into).collect(),
        })
        .into_response(),
        Err(e) => problem(e).into_response(),
    }
}

/// A discarded job.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Discarded {
    /// The job, now deleted with its history and enqueue key.
    pub id: i64,
}

/// Delete a dead job with its history and enqueue key (`idem dead discard`).
#[utoipa::path(post, path = "/v1/jobs/{id}/discard", tag = "jobs",
    params(("id" = i64, Path, description = "job id")),
    responses((status = 200, body = Discarded),
        (status = 409, description = "not dead", body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn discard(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiPath(id): ApiPath<i64>,
) -> Response {
    let job = match visible_job(&state, &principal, id).await {
        Ok(job) => job,
        Err(p) => return p.into_response(),
    };
    match state.idem.discard_jobs(vec![id]).await {
        Ok(ids) if ids.contains(&id) => axum::Json(Discarded { id }).into_response(),
        Ok(_) => Problem::new(
            StatusCode::CONFLICT,
            "not_dead",
            format!("job {id} is {}; only dead jobs are discarded", job.state),
        )
        .into_response(),
        Err(e) => problem(e).into_response(),
    }
}

/// The longest settle delay a pass takes: a day.
const MAX_SETTLE_MS: u64 = 86_400_000;

/// A reconciliation pass.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReconcileRequest {
    /// How long after an intent last changed before an absent answer is trusted, in
    /// milliseconds (default 60000, at most a day).
    pub settle_ms: Option<u64>,
}

/// Look the built-in kinds' unknown calls up on their remote once and settle them
/// (`idem reconcile`; operators).
#[utoipa::path(post, path = "/v1/reconcile", tag = "operations",
    request_body = ReconcileRequest,
    responses((status = 200, body = Object, description = "what the pass did: counts \
        looked_up, applied, absent, settling, duplicates, manual, skipped, raced, audited, \
        audit_duplicates, jobs_retried (as `idem reconcile --json`)"),
        (status = 403, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn reconcile(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiJson(request): ApiJson<ReconcileRequest>,
) -> Response {
    if !principal.is_operator() {
        return operator_only("reconciliation").rejection();
    }
    let Some(reconciler) = &state.reconciler else {
        return Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_reconciler",
            "this server has no job kinds to reconcile",
        )
        .into_response();
    };
    let mut options = ReconcileOptions::default();
    if let Some(ms) = request.settle_ms {
        if ms > MAX_SETTLE_MS {
            return super::error::invalid(format!(
                "settle_ms {ms} is above {MAX_SETTLE_MS} (a day)"
            ))
            .rejection();
        }
        options.settle = Duration::from_millis(ms);
    }
    match reconciler.run(options).await {
        Ok(report) => axum::Json(report).into_response(),
        Err(e) => problem(e).into_response(),
    }
}

/// A purge.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PurgeRequest {
    /// Count what is past its retention and delete nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// Records of one kind past their retention.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PurgeCount {
    /// enqueue-keys, effect-keys, intents, finished-jobs, dead-jobs, http-keys or batches.
    pub target: String,
    /// How many were deleted (or, for a dry run, would be).
    pub count: u64,
}

/// What a purge did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Purged {
    /// Per kind of record.
    pub targets: Vec<PurgeCount>,
}

/// Delete records past their retention, in batches (`idem purge`; operators).
#[utoipa::path(post, path = "/v1/purge", tag = "operations", request_body = PurgeRequest,
    responses((status = 200, body = Purged),
        (status = 403, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn purge(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiJson(request): ApiJson<PurgeRequest>,
) -> Response {
    if !principal.is_operator() {
        return operator_only("purging").rejection();
    }
    let mut targets = Vec::new();
    for target in PurgeTarget::ALL {
        let counted = match state.idem.purge_cutoff(target).await {
            Ok(before) if request.dry_run => state.idem.purge_count(target, before).await,
            Ok(before) => {
                state
                    .idem
                    .purge_before(target, before, idem::DEFAULT_PURGE_BATCH, |_| {})
                    .await
            }
            Err(e) => Err(e),
        };
        match counted {
            Ok(count) => targets.push(PurgeCount {
                target: target.as_str().to_string(),
                count,
            }),
            Err(e) => return problem(e).into_response(),
        }
    }
    axum::Json(Purged { targets }).into_response()
}

/// An account whose running total differs from the sum of its entries.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Mismatch {
    /// The account.
    pub account: String,
    /// The stored running total (none: entries exist but no total).
    pub balance: Option<i64>,
    /// The sum of its entries.
    pub sum: i64,
    /// How many entries it has.
    pub entries: i64,
}

/// The ledger's mismatches.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Ledger {
    /// Accounts whose total differs from their entries (empty: all agree).
    pub mismatches: Vec<Mismatch>,
    /// Whether the totals were rebuilt.
    pub repaired: bool,
}

fn ledger(rows: Vec<idem_store::LedgerMismatch>, repaired: bool) -> Response {
    axum::Json(Ledger {
        mismatches: rows
            .into_iter()
            .map(|m| Mismatch {
                account: m.account,
                balance: m.balance,
                sum: m.sum,
                entries: m.entries,
            })
            .collect(),
        repaired,
    })
    .into_response()
}

/// Compare every running total with the sum of its entries (`idem ledger verify`;
/// operators).
#[utoipa::path(get, path = "/v1/ledger/verify", tag = "operations",
    responses((status = 200, body = Ledger),
        (status = 403, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn ledger_verify(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
) -> Response {
    if !principal.is_operator() {
        return operator_only("the ledger").into_response();
    }
    match state.idem.ledger_verify().await {
        Ok(rows) => ledger(rows, false),
        Err(e) => problem(e).into_response(),
    }
}

/// A repair.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RepairRequest {
    /// Rebuild the mismatched totals (default: only report them).
    #[serde(default)]
    pub apply: bool,
}

/// Rebuild mismatched running totals from their entries (`idem ledger repair`;
/// operators).
#[utoipa::path(post, path = "/v1/ledger/repair", tag = "operations",
    request_body = RepairRequest,
    responses((status = 200, body = Ledger),
        (status = 403, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn ledger_repair(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiJson(request): ApiJson<RepairRequest>,
) -> Response {
    if !principal.is_operator() {
        return operator_only("the ledger").rejection();
    }
    match state.idem.ledger_repair(request.apply).await {
        Ok(rows) => ledger(rows, request.apply),
        Err(e) => problem(e).into_response(),
    }
}
