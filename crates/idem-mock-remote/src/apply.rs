//! `POST /effects`: the apply pipeline, as named steps.
//!
//! arrive → parse the body → take the next apply fault → pass the gate → pre-apply fault
//! (`Status`, `Delay`) → apply in the ledger (and the journal) → answer (`ApplyThenStatus`,
//! `ApplyThenHang`, or `201`). The fault is taken at arrival, so faults meet requests in
//! arrival order. A journal that cannot be written answers `500` and applies nothing.
//! A request runs to its end even when its client hangs up (it runs in a task of its own).

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::fault::Fault;
use crate::ledger::Outcome;
use crate::log::LogEntry;
use crate::server::answer;
use crate::shared::Shared;

/// The request header that carries the client's key.
const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// The response header that marks a keyed replay.
const REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// Handles one `POST /effects` in a task of its own, as a real service goes on with a
/// request whose client hung up: a delayed request still applies after its caller timed
/// out (a late copy), and its answer goes nowhere.
pub(crate) async fn handle(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let pipeline = tokio::spawn(pipeline(shared, headers, body));
    pipeline
        .await
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The pipeline of one `POST /effects`.
async fn pipeline(shared: Arc<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    shared.arrive();
    let key = idempotency_key(&headers);
    let mut entry = LogEntry::new("POST", key.clone());
    let Some(body) = parse(&body) else {
        return answer(&shared, entry, 400);
    };
    entry.body = Some(body.clone());
    let fault = shared.take_apply_fault();
    if let Err(status) = before_apply(&shared, fault).await {
        return answer(&shared, entry, status);
    }
    let outcome = match shared.apply(key.as_deref(), &body) {
        Ok(outcome) => outcome,
        Err(e) => return journal_failed(&shared, entry, &e),
    };
    entry.applied = (!outcome.replayed).then(|| outcome.id.clone());
    entry.replayed = outcome.replayed;
    after_apply(&shared, fault, entry, outcome).await
}

/// Answers `500` to a request whose copy could not be journaled (so was not applied), and
/// says why on stderr: the remote has no other way to tell its operator.
fn journal_failed(shared: &Shared, entry: LogEntry, e: &std::io::Error) -> Response {
    eprintln!("idem-mock-remote: applied nothing, answered 500: {e}");
    answer(shared, entry, 500)
}

/// The `Idempotency-Key` header, when present and readable.
fn idempotency_key(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(IDEMPOTENCY_KEY)?.to_str().ok()?;
    Some(value.to_owned())
}

/// The body as JSON; an empty body is `Null`, an unparsable one `None`.
fn parse(body: &[u8]) -> Option<serde_json::Value> {
    if body.is_empty() {
        return Some(serde_json::Value::Null);
    }
    serde_json::from_slice(body).ok()
}

/// The gate and the faults that act before applying; `Err` is the status to answer.
async fn before_apply(shared: &Shared, fault: Option<Fault>) -> Result<(), u16> {
    if !shared.gate.pass(shared.stopped()).await {
        return Err(503);
    }
    match fault {
        Some(Fault::Status(status)) => Err(status),
        Some(Fault::Delay(delay)) => wait(shared, delay).await,
        _ => Ok(()),
    }
}

/// Waits out a `Delay` fault, cut short (503) by shutdown.
async fn wait(shared: &Shared, delay: Duration) -> Result<(), u16> {
    tokio::select! {
        () = tokio::time::sleep(delay) => Ok(()),
        () = shared.stopped() => Err(503),
    }
}

/// Answers an applied (or replayed) request as its fault says.
async fn after_apply(
    shared: &Shared,
    fault: Option<Fault>,
    entry: LogEntry,
    outcome: Outcome,
) -> Response {
    match fault {
        Some(Fault::ApplyThenStatus(status)) => answer(shared, entry, status),
        Some(Fault::ApplyThenHang) => hang(shared, entry).await,
        _ => created(shared, entry, outcome),
    }
}

/// Never answers: logs the request without a status, then waits for shutdown.
async fn hang(shared: &Shared, entry: LogEntry) -> Response {
    shared.record(entry);
    shared.stopped().await;
    StatusCode::SERVICE_UNAVAILABLE.into_response()
}

/// Answers `201` with the copy's id and reference, marking a replay.
fn created(shared: &Shared, mut entry: LogEntry, outcome: Outcome) -> Response {
    entry.status = Some(201);
    shared.record(entry);
    let body = Json(json!({ "id": outcome.id, "reference": outcome.reference }));
    let mut response = (StatusCode::CREATED, body).into_response();
    if outcome.replayed {
        let headers = response.headers_mut();
        headers.insert(REPLAYED, HeaderValue::from_static("true"));
    }
    response
}
