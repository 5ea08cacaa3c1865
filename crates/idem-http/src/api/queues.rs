//! Operations endpoints: queue counts, pausing and resuming a queue, health.

use axum::Extension;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::ApiState;
use super::error::{operator_only, problem};
use super::extract::ApiPath;
use super::view::QueueCountView;
use crate::principal::Principal;
use crate::problem::Problem;

/// Queue counts.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Queues {
    /// Jobs per queue and state (states with no jobs are absent).
    pub counts: Vec<QueueCountView>,
    /// Per queue: how long its oldest due job has waited, in milliseconds.
    pub oldest_due_ms: Vec<OldestDue>,
    /// The paused queues.
    pub paused: Vec<PausedView>,
}

/// A paused queue.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PausedView {
    /// The queue.
    pub queue: String,
    /// When it was paused.
    pub paused_at: chrono::DateTime<chrono::Utc>,
    /// Who paused it (an API principal, `cli`), if known.
    pub paused_by: Option<String>,
}

impl From<idem::PausedQueue> for PausedView {
    fn from(p: idem::PausedQueue) -> Self {
        PausedView {
            queue: p.queue,
            paused_at: p.paused_at,
            paused_by: p.paused_by,
        }
    }
}

/// A pause or resume.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Steered {
    /// The queue.
    pub queue: String,
    /// `paused` or `resumed`: where the queue stands now.
    pub state: String,
    /// Whether this request changed it (false: it stood so already).
    pub changed: bool,
}

/// The wait of a queue's oldest due job.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct OldestDue {
    /// The queue.
    pub queue: String,
    /// Milliseconds since its oldest waiting job became due.
    pub ms: i64,
}

/// Per-queue counts by state, and the oldest due job's wait (operators only: counts span
/// every principal).
#[utoipa::path(get, path = "/v1/queues", tag = "operations",
    responses((status = 200, body = Queues),
        (status = 403, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn queues(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
) -> Response {
    if !principal.is_operator() {
        return operator_only("queue counts").into_response();
    }
    let counts = match state.idem.queue_counts().await {
        Ok(c) => c,
        Err(e) => return problem(e).into_response(),
    };
    let waiting = match state.idem.queue_waiting().await {
        Ok(w) => w,
        Err(e) => return problem(e).into_response(),
    };
    let paused = match state.idem.paused_queues().await {
        Ok(p) => p,
        Err(e) => return problem(e).into_response(),
    };
    let now = match state.idem.now().await {
        Ok(n) => n,
        Err(e) => return problem(e).into_response(),
    };
    let mut oldest: Vec<OldestDue> = Vec::new();
    for w in waiting {
        let ms = (now - w.oldest_run_at).num_milliseconds().max(0);
        match oldest.iter_mut().find(|o| o.queue == w.queue) {
            Some(o) => o.ms = o.ms.max(ms),
            None => oldest.push(OldestDue { queue: w.queue, ms }),
        }
    }
    axum::Json(Queues {
        counts: counts.into_iter().map(Into::into).collect(),
        oldest_due_ms: oldest,
        paused: paused.into_iter().map(Into::into).collect(),
    })
    .into_response()
}

/// Stop claims from a queue in every worker until it is resumed; enqueues go on and
/// running jobs finish (operators; `idem queues pause`).
#[utoipa::path(post, path = "/v1/queues/{queue}/pause", tag = "operations",
    params(("queue" = String, Path, description = "queue name")),
    responses((status = 200, body = Steered),
        (status = 403, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn pause(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiPath(queue): ApiPath<String>,
) -> Response {
    if !principal.is_operator() {
        return operator_only("pausing a queue").into_response();
    }
    let changed = state.idem.pause_queue(&queue, Some(principal.name())).await;
    steered(queue, "paused", changed)
}

/// Let workers claim from a queue again and wake them (operators; `idem queues resume`).
#[utoipa::path(post, path = "/v1/queues/{queue}/resume", tag = "operations",
    params(("queue" = String, Path, description = "queue name")),
    responses((status = 200, body = Steered),
        (status = 403, body = Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn resume(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    ApiPath(queue): ApiPath<String>,
) -> Response {
    if !principal.is_operator() {
        return operator_only("resuming a queue").into_response();
    }
    let changed = state.idem.resume_queue(&queue).await;
    steered(queue, "resumed", changed)
}

fn steered(queue: String, now: &str, changed: Result<bool, idem::IdemError>) -> Response {
    match changed {
        Ok(changed) => axum::Json(Steered {
            queue,
            state: now.to_owned(),
            changed,
        })
        .into_response(),
        Err(e) => problem(e).into_response(),
    }
}

/// Health.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok` when the store answers.
    pub status: String,
}

/// Whether the server and its store answer (no authentication).
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, body = Health),
        (status = 503, body = Problem, content_type = "application/problem+json")))]
pub async fn healthz(State(state): State<ApiState>) -> Response {
    match state.idem.now().await {
        Ok(_) => axum::Json(Health {
            status: "ok".into(),
        })
        .into_response(),
        Err(e) => problem(e).into_response(),
    }
}
