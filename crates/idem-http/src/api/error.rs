//! What each engine error means to an HTTP client: one status and one stable problem
//! name per kind of error.

use axum::http::StatusCode;
use idem::IdemError;
use idem_store::StoreError;

use crate::problem::Problem;

/// The problem an engine error becomes.
pub fn problem(e: IdemError) -> Problem {
    let detail = e.to_string();
    match e {
        IdemError::Store(s) => store_problem(s, detail),
        IdemError::Config(_) | IdemError::InvalidJob(_) | IdemError::InvalidKey(_) => {
            Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", detail)
        }
        IdemError::IntentMismatch { .. } => {
            Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "intent_mismatch", detail)
        }
        IdemError::RetryRefused(_) => Problem::new(StatusCode::CONFLICT, "retry_refused", detail),
    }
}

fn store_problem(e: StoreError, detail: String) -> Problem {
    match e {
        StoreError::LeaseLost { .. } => Problem::new(StatusCode::CONFLICT, "lease_lost", detail),
        StoreError::IntentLost { .. } => Problem::new(StatusCode::CONFLICT, "intent_lost", detail),
        StoreError::LeadershipLost { .. } => {
            Problem::new(StatusCode::CONFLICT, "leadership_lost", detail)
        }
        StoreError::NotFound { .. } => Problem::new(StatusCode::NOT_FOUND, "not_found", detail),
        StoreError::Conflict(_) | StoreError::Duplicate(_) => {
            Problem::new(StatusCode::CONFLICT, "conflict", detail)
        }
        StoreError::Invalid(_) => {
            Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", detail)
        }
        StoreError::Busy(_) => {
            Problem::new(StatusCode::SERVICE_UNAVAILABLE, "busy", detail).retry_after(1)
        }
        StoreError::Unavailable(_) => {
            Problem::new(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", detail)
                .retry_after(1)
        }
        StoreError::Config(_)
        | StoreError::Migration(_)
        | StoreError::SchemaNotCurrent(_)
        | StoreError::Database(_) => {
            tracing::error!(error = %detail, "store error");
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "store_error",
                "the store failed the operation; the server log has the details",
            )
        }
    }
}

/// 404 for a record that does not exist or that this principal may not see (the two are
/// not told apart, so ids of other principals' records leak nothing).
pub fn not_found(what: &str) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("{what} not found"),
    )
}

/// 422 for a request that names something invalid; the detail says what and how to fix it.
pub fn invalid(detail: impl Into<String>) -> Problem {
    Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", detail)
}

/// 403 for an action reserved to operators.
pub fn operator_only(action: &str) -> Problem {
    Problem::new(
        StatusCode::FORBIDDEN,
        "operator_only",
        format!("{action} is for operator principals; use an operator token"),
    )
}
