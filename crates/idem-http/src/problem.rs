//! Errors as `application/problem+json` (RFC 9457), each with a stable `type`.
//!
//! The `type` is a URI under `urn:idem:problem:` followed by a snake_case name that never
//! changes meaning; clients branch on it, never on `title` or `detail`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Marks a response the Idempotency-Key layer must not store: the request was rejected
/// before its handler acted (authentication, validation, limits), so a repeat with a
/// corrected request is a new request.
#[derive(Debug, Clone, Copy)]
pub struct NotStored;

/// One error, as the client receives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Problem {
    /// `urn:idem:problem:<name>`: stable; branch on it.
    #[serde(rename = "type")]
    pub kind: String,
    /// A short summary of the kind of problem.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong with this request and what to do.
    pub detail: String,
    /// Seconds after which a repeat may succeed (also sent as `Retry-After`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

impl Problem {
    /// A problem with the given status, stable name and detail; the title is the
    /// status's reason phrase.
    pub fn new(status: StatusCode, name: &str, detail: impl Into<String>) -> Problem {
        Problem {
            kind: format!("urn:idem:problem:{name}"),
            title: status.canonical_reason().unwrap_or("Error").to_string(),
            status: status.as_u16(),
            detail: detail.into(),
            retry_after: None,
        }
    }

    /// The same problem, telling the client to wait `seconds` before repeating.
    pub fn retry_after(mut self, seconds: u64) -> Problem {
        self.retry_after = Some(seconds);
        self
    }

    /// The stable name (the part of `type` after `urn:idem:problem:`).
    pub fn name(&self) -> &str {
        self.kind
            .strip_prefix("urn:idem:problem:")
            .unwrap_or(&self.kind)
    }

    /// The response, marked [`NotStored`]: for rejections before the handler acted.
    pub fn rejection(self) -> Response {
        let mut response = self.into_response();
        response.extensions_mut().insert(NotStored);
        response
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let retry_after = self.retry_after;
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(seconds) = retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.name(), self.status, self.detail)
    }
}
