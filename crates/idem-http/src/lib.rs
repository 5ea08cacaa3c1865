//! idem over HTTP: the API of `idem serve`, its Idempotency-Key layer and principals.
//!
//! - [`api`]: the routes of `idem serve` and the layers around them.
//! - [`auth`]: bearer tokens, each naming a principal.
//! - [`dashboard`]: the web dashboard at `/`, for operators.
//! - [`idempotency`]: the inbound Idempotency-Key `tower::Layer`, usable by any axum app.
//! - [`principal`]: who a request acts for.
//! - [`problem`]: errors as `application/problem+json` with a stable `type`.
#![warn(missing_docs)]

pub mod api;
pub mod auth;
pub mod dashboard;
pub mod idempotency;
pub mod principal;
pub mod problem;

pub use principal::Principal;
pub use problem::Problem;
