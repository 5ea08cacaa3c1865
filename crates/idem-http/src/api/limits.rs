//! The limits a public endpoint needs: a cap on requests in flight (over it → 503 with
//! `Retry-After`), a timeout per request (→ 503), and a body size (→ 413, enforced by
//! the extractors and the Idempotency-Key layer). A handler that panics answers 500
//! instead of dropping the connection.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::FutureExt;
use tokio::sync::Semaphore;

use crate::problem::Problem;

/// Request limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Requests handled at once; more are answered 503 at once.
    pub concurrency: usize,
    /// The longest a request may take.
    pub timeout: Duration,
    /// The largest request body, in bytes.
    pub max_body: usize,
    permits: Arc<Semaphore>,
}

impl Limits {
    /// Limits with these values.
    pub fn new(concurrency: usize, timeout: Duration, max_body: usize) -> Limits {
        Limits {
            concurrency,
            timeout,
            max_body,
            permits: Arc::new(Semaphore::new(concurrency)),
        }
    }
}

impl Default for Limits {
    /// 256 requests at once, 30 s each, 1 MiB bodies.
    fn default() -> Self {
        Limits::new(256, Duration::from_secs(30), 1 << 20)
    }
}

/// The middleware.
pub async fn enforce(State(limits): State<Arc<Limits>>, request: Request, next: Next) -> Response {
    let Ok(_permit) = limits.permits.clone().try_acquire_owned() else {
        return Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            format!(
                "the server is handling {} requests, its limit; repeat after Retry-After",
                limits.concurrency
            ),
        )
        .retry_after(1)
        .rejection();
    };
    let run = std::panic::AssertUnwindSafe(next.run(request)).catch_unwind();
    match tokio::time::timeout(limits.timeout, run).await {
        Ok(Ok(response)) => response,
        Ok(Err(_)) => {
            // The panic is logged by the panic hook; the client gets an answer, not a
            // dropped connection.
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the server failed while handling the request; the server log has the details",
            )
            .into_response()
        }
        Err(_) => Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "timeout",
            format!(
                "the request took longer than {:?}; repeat it (with the same Idempotency-Key, it \
                 replays or waits for the first)",
                limits.timeout
            ),
        )
        .retry_after(1)
        .rejection(),
    }
}
