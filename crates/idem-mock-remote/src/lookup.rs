//! `GET /effects?reference=K`: the lookup reconciliation uses to ask "did it happen?".
//!
//! Answers `200 {"ids": [...]}` with every copy applied with that reference (two or more
//! mean a duplicate), `404 {"ids": []}` when none, or a `LookupStatus` fault's status.
//! Lookups never wait at the gate.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use crate::log::LogEntry;
use crate::server::answer;
use crate::shared::Shared;

/// The lookup's query string.
#[derive(Debug, Deserialize)]
pub(crate) struct LookupQuery {
    reference: Option<String>,
}

/// Handles one `GET /effects`.
pub(crate) async fn handle(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<LookupQuery>,
) -> Response {
    shared.arrive();
    let mut entry = LogEntry::new("GET", query.reference.clone());
    if let Some(status) = shared.take_lookup_fault().and_then(|f| f.status()) {
        return answer(&shared, entry, status);
    }
    let Some(reference) = query.reference else {
        return answer(&shared, entry, 400);
    };
    let ids = shared.ledger().ids_for(&reference);
    let status = if ids.is_empty() {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::OK
    };
    entry.status = Some(status.as_u16());
    shared.record(entry);
    (status, Json(json!({ "ids": ids }))).into_response()
}
