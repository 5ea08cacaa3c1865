//! The HTTP API of `idem serve` (DESIGN.md section 5): routes, the state they share,
//! and the layers around them.
//!
//! Layers, outermost first: the request limits (concurrency cap, timeout, body size),
//! then, on `/v1` only, authentication (a [`crate::Principal`] per bearer token) and
//! the Idempotency-Key layer, which therefore scopes keys by principal and never sees a
//! request that failed authentication.

mod batches;
mod error;
mod extract;
mod intents;
mod jobs;
mod keyed;
mod limits;
mod openapi;
mod operator;
mod queues;
mod scope;
mod view;
mod worker;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware::from_fn_with_state;
use axum::response::Response;
use axum::routing::{get, post};
use idem::intent::Reconciler;
use idem::{Idem, WorkerProtocol};

use crate::auth::{Auth, authenticate};
use crate::idempotency::{IdempotencyConfig, IdempotencyLayer};
use crate::problem::Problem;

pub use limits::Limits;
pub(crate) use limits::enforce as enforce_limits;
pub use openapi::ApiDoc;
pub use view::{
    BatchAddedView, BatchPage, BatchView, EnqueuedView, IntentView, JobPage, JobView, SuccessorView,
};

/// The largest page a listing returns.
pub const MAX_PAGE: u32 = 500;

/// The page size when none is asked for.
pub const DEFAULT_PAGE: u32 = 50;

/// What every handler shares.
#[derive(Clone)]
pub struct ApiState {
    idem: Idem,
    protocol: WorkerProtocol,
    reconciler: Option<Reconciler>,
    settings: Arc<Settings>,
}

struct Settings;

impl Settings {
    /// The page size for `asked`: the default when none; refused outside 1..=MAX_PAGE.
    fn page(&self, asked: Option<u32>) -> Result<u32, Problem> {
        match asked {
            None => Ok(DEFAULT_PAGE),
            Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
            Some(n) => Err(error::invalid(format!(
                "limit {n} is outside 1..={MAX_PAGE}; page through with each page's `next`"
            ))),
        }
    }
}

/// Everything the API is built from.
pub struct Api {
    /// The client (its store, clock and retention).
    pub idem: Idem,
    /// The worker protocol (its lease, ladders and bounds).
    pub protocol: WorkerProtocol,
    /// How requests authenticate.
    pub auth: Auth,
    /// The Idempotency-Key layer's settings.
    pub idempotency: IdempotencyConfig,
    /// Request limits.
    pub limits: Limits,
    /// Reconciliation of the kinds this server knows (`POST /v1/reconcile`).
    pub reconciler: Option<Reconciler>,
}

impl Api {
    /// The router, with every layer; refused when the Idempotency-Key settings are.
    pub fn router(self) -> Result<Router, idem::IdemError> {
        let state = ApiState {
            idem: self.idem.clone(),
            protocol: self.protocol,
            reconciler: self.reconciler,
            settings: Arc::new(Settings),
        };
        let purged_after = self.idem.retention().http_keys;
        if purged_after <= self.idempotency.lease {
            return Err(idem::IdemError::Config(format!(
                "retention.http_keys ({}) must be longer than the Idempotency-Key lease ({}): \
                 the purger would otherwise delete records of requests still running",
                idem::config::human(purged_after),
                idem::config::human(self.idempotency.lease)
            )));
        }
        let keys = IdempotencyLayer::new(self.idem.store().clone(), self.idempotency)?;
        let v1 = Router::new()
            .route("/v1/jobs", post(jobs::enqueue).get(jobs::list))
            .route("/v1/jobs/{id}", get(jobs::get))
            .route("/v1/jobs/{id}/retry", post(jobs::retry))
            .route("/v1/jobs/{id}/cancel", post(jobs::cancel))
            .route("/v1/jobs/{id}/attempts", get(operator::attempts))
            .route("/v1/jobs/{id}/discard", post(operator::discard))
            .route("/v1/reconcile", post(operator::reconcile))
            .route("/v1/purge", post(operator::purge))
            .route("/v1/ledger/verify", get(operator::ledger_verify))
            .route("/v1/ledger/repair", post(operator::ledger_repair))
            .route("/v1/batches", post(batches::create).get(batches::list))
            .route("/v1/batches/{id}", get(batches::get))
            .route(
                "/v1/batches/{id}/children",
                post(batches::add).get(batches::children),
            )
            .route("/v1/batches/{id}/seal", post(batches::seal))
            .route("/v1/claims", post(worker::claim))
            .route("/v1/jobs/{id}/heartbeat", post(worker::heartbeat))
            .route("/v1/jobs/{id}/complete", post(worker::complete))
            .route("/v1/jobs/{id}/fail", post(worker::fail))
            .route("/v1/intents", get(intents::list))
            .route("/v1/intents/{key}", get(intents::get))
            .route("/v1/intents/{key}/begin", post(intents::begin))
            .route("/v1/intents/{key}/renew", post(intents::renew))
            .route("/v1/intents/{key}/complete", post(intents::complete))
            .route("/v1/intents/{key}/fail", post(intents::fail))
            .route("/v1/intents/{key}/unknown", post(intents::unknown))
            .route("/v1/intents/{key}/release", post(intents::release))
            .route("/v1/intents/{key}/resolve", post(intents::resolve))
            .route("/v1/queues", get(queues::queues))
            .route("/v1/queues/{queue}/pause", post(queues::pause))
            .route("/v1/queues/{queue}/resume", post(queues::resume))
            .layer(keys)
            .layer(from_fn_with_state(self.auth, authenticate));
        let max_body = self.limits.max_body;
        Ok(Router::new()
            .merge(v1)
            .route("/healthz", get(queues::healthz))
            .route("/openapi.json", get(openapi::document))
            .fallback(not_found)
            .method_not_allowed_fallback(method_not_allowed)
            .with_state(state)
            .layer(DefaultBodyLimit::max(max_body))
            .layer(axum::Extension(extract::BodyLimit(max_body)))
            .layer(from_fn_with_state(Arc::new(self.limits), limits::enforce)))
    }
}

async fn not_found() -> Response {
    Problem::new(
        StatusCode::NOT_FOUND,
        "no_route",
        "no such endpoint; GET /openapi.json lists them",
    )
    .rejection()
}

async fn method_not_allowed() -> Response {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take that method; GET /openapi.json lists them",
    )
    .rejection()
}
