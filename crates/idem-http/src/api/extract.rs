//! Extractors whose rejections are problems: a malformed body, query or path is answered
//! with `application/problem+json` naming what was wrong, and is never stored under an
//! Idempotency-Key.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::Response;
use serde::de::DeserializeOwned;

use super::error::invalid;
use crate::problem::Problem;

/// The largest request body, in the request's extensions, so that a refusal names it.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// A JSON body: always a JSON object (serde would also read a struct from an array,
/// so `[]` would pass for a request with every field defaulted).
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        let limit = req.extensions().get::<BodyLimit>().copied();
        let value = match axum::Json::<serde_json::Value>::from_request(req, state).await {
            Ok(axum::Json(v)) => v,
            Err(e) => return Err(json_rejection(e, limit).rejection()),
        };
        if !value.is_object() {
            return Err(Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request",
                "the request body must be a JSON object",
            )
            .rejection());
        }
        serde_json::from_value(value).map(ApiJson).map_err(|e| {
            Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request",
                format!("the request body does not fit: {e}"),
            )
            .rejection()
        })
    }
}

fn json_rejection(e: JsonRejection, limit: Option<BodyLimit>) -> Problem {
    let status = e.status();
    if let (StatusCode::PAYLOAD_TOO_LARGE, Some(BodyLimit(n))) = (status, limit) {
        return Problem::new(
            status,
            "body_too_large",
            format!("the request body is larger than {n} bytes, the server's limit"),
        );
    }
    let name = match &e {
        JsonRejection::MissingJsonContentType(_) => "content_type",
        JsonRejection::JsonSyntaxError(_) => "json_syntax",
        JsonRejection::JsonDataError(_) => "invalid_request",
        _ if status == StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
        _ => "body_unreadable",
    };
    let status = if status == StatusCode::BAD_REQUEST || status.is_client_error() {
        status
    } else {
        StatusCode::BAD_REQUEST
    };
    Problem::new(status, name, e.body_text())
}

/// A query string.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ApiQuery(v)),
            Err(e) => Err(query_rejection(e).rejection()),
        }
    }
}

fn query_rejection(e: QueryRejection) -> Problem {
    Problem::new(StatusCode::BAD_REQUEST, "invalid_query", e.body_text())
}

/// Path parameters.
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(ApiPath(v)),
            Err(e) => Err(path_rejection(e).rejection()),
        }
    }
}

fn path_rejection(e: PathRejection) -> Problem {
    Problem::new(StatusCode::BAD_REQUEST, "invalid_path", e.body_text())
}

/// A filter of a query (a state, say) parsed from its text; a value the parser refuses
/// is 422 with the parser's message.
pub fn parsed<T>(value: Option<&str>) -> Result<Option<T>, Problem>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    value
        .map(str::parse::<T>)
        .transpose()
        .map_err(|e| invalid(e.to_string()))
}
