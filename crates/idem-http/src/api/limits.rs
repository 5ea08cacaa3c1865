//! The limits a public endpoint needs: a cap on requests in flight (over it → 503 with
//! `Retry-After`), a timeout per request (→ 503), and a body size (→ 413, enforced by
//! the extractors and the Idempotency-Key layer).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
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
    match tokio::time::timeout(limits.timeout, next.run(request)).await {
        Ok(response) => response,
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
