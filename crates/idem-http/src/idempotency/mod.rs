//! The inbound Idempotency-Key layer: a `tower::Layer` that any axum app can mount so a
//! client may repeat a `POST` (after a timeout, a dropped connection, a crash) and get
//! the first answer instead of a second effect.
//!
//! What it does, per request with an `Idempotency-Key` header (GET, HEAD and OPTIONS
//! ignore the header; requests without it pass straight through):
//! - The key (see [`key`]) is scoped by the request's [`Principal`] (from the request's
//!   extensions; mount authentication outside this layer), so two principals never see
//!   each other's records.
//! - The request's [`fingerprint`] (method, path, query, canonical JSON body) is taken,
//!   and the key is reserved in one atomic write on the store (`idem_http_key`): the
//!   first request holds it until the reservation's lease ends.
//! - The holder runs the inner service. Its response is stored (status, the headers
//!   named in [`IdempotencyConfig::stored_headers`], the body byte for byte) and sent
//!   with `Idempotent-Replayed: false`. Not stored, and the key released for the next
//!   request: a 5xx, a response marked [`NotStored`], and the statuses that mean the
//!   request was refused before it acted (400, 401, 403, 408, 413, 415, 422, 429). A
//!   request whose handler never finished (the client went away) keeps its reservation
//!   until the lease ends, since the handler may have acted.
//! - A repeat with the same fingerprint gets the stored status and body with
//!   `Idempotent-Replayed: true`, without running anything; one that arrives while the
//!   first is in flight gets 409 with `Retry-After`; the same key with another
//!   fingerprint gets 422. A server killed mid-request leaves a reservation that blocks
//!   only until its lease ends; then a repeat with the same fingerprint runs.
//! - An answer larger than [`IdempotencyConfig::max_stored_body`] is sent but not
//!   stored; its key stays reserved until the lease ends (the handler has acted).
//! - Records are kept for [`IdempotencyConfig::retention`] (24 h), after which a repeat
//!   is a new request; `PurgeTarget::HttpKeys` deletes them by creation time. The
//!   retention must be longer than the lease ([`IdempotencyConfig::check`]).
//!
//! Malformed keys get 400, bodies over [`IdempotencyConfig::max_body`] 413, a store that
//! cannot be reached 503; none of them stores anything.
//!
//! ```no_run
//! use axum::{Router, routing::post};
//! use idem_http::idempotency::{IdempotencyConfig, IdempotencyLayer};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let idem = idem::Idem::connect("sqlite://app.db").await?;
//! let app: Router = Router::new()
//!     .route("/orders", post(|| async { "created" }))
//!     .layer(IdempotencyLayer::new(idem.store().clone(), IdempotencyConfig::default())?);
//! # Ok(()) }
//! ```

pub mod fingerprint;
pub mod key;
mod service;

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderName, header};
use idem::{Clock, IdemError};
use idem_store::Store;

pub use crate::principal::Principal;
pub use crate::problem::NotStored;
pub use service::IdempotencyService;

/// In the request's extensions while the layer holds its key: a handler whose effect is
/// a write to the same store can store its answer in the effect's own transaction
/// ([`Reservation::complete`]) and mark its response [`AnswerStored`]; the answer and
/// the effect then commit together, and the layer makes no write after the handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// The principal the key is scoped by.
    pub principal: String,
    /// The key.
    pub key: String,
    /// The fence of this request's reservation.
    pub fence: i64,
    /// When it was reserved (with the fence, names this reservation).
    pub created_at: idem_store::Timestamp,
}

impl Reservation {
    /// The write that stores `status`, `headers` and `body` as the key's answer; run it
    /// with [`idem_store::StoreTx::http_key_complete`] in the effect's transaction, and
    /// roll the effect back when it returns `false` (the reservation was taken over).
    pub fn complete(
        &self,
        status: u16,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> idem_store::HttpKeyComplete {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v.to_string()))
            .collect();
        idem_store::HttpKeyComplete {
            principal: self.principal.clone(),
            key: self.key.clone(),
            fence: self.fence,
            created_at: self.created_at,
            status: i32::from(status),
            headers: serde_json::to_value(headers).expect("strings encode"),
            body,
        }
    }
}

/// Marks a response whose answer the handler stored itself (see [`Reservation`]).
#[derive(Debug, Clone, Copy)]
pub struct AnswerStored;

/// The header that tells a client whether the answer is a replay.
pub const REPLAYED: &str = "idempotent-replayed";

/// How the layer behaves.
#[derive(Debug, Clone)]
pub struct IdempotencyConfig {
    /// How long a reservation blocks repeats of a request still in flight; a server
    /// killed mid-request blocks its key this long. Must exceed the longest a handler may
    /// run (the server's request timeout). Default 60 s.
    pub lease: Duration,
    /// How long a stored answer replays. Default 24 h.
    pub retention: Duration,
    /// The largest request body the layer reads, in bytes (larger → 413). Default 1 MiB.
    pub max_body: usize,
    /// The largest response body the layer stores, in bytes. A larger answer is sent
    /// but not stored, and the key stays reserved until its lease ends (the handler has
    /// acted: a repeat gets 409 until then, then runs again); logged as a warning.
    /// Default 1 MiB.
    pub max_stored_body: usize,
    /// The response headers stored and replayed. Default `Content-Type`, `Location`.
    pub stored_headers: Vec<HeaderName>,
    /// The scope of requests that carry no [`Principal`]. Default `"anonymous"`.
    pub anonymous: String,
    /// The time passed to the store; the default ([`idem::DatabaseClock`]) uses the
    /// database's clock. Tests inject a [`idem::ManualClock`].
    pub clock: Arc<dyn Clock>,
}

impl Default for IdempotencyConfig {
    fn default() -> Self {
        IdempotencyConfig {
            lease: Duration::from_secs(60),
            retention: Duration::from_secs(24 * 3600),
            max_body: 1 << 20,
            max_stored_body: 1 << 20,
            stored_headers: vec![header::CONTENT_TYPE, header::LOCATION],
            anonymous: "anonymous".into(),
            clock: Arc::new(idem::DatabaseClock),
        }
    }
}

/// The layer; see the module documentation.
#[derive(Clone)]
pub struct IdempotencyLayer {
    store: Arc<dyn Store>,
    config: Arc<IdempotencyConfig>,
}

impl IdempotencyConfig {
    /// Refuses settings under which a repeat could run beside its first request: a
    /// retention no longer than the lease would let a purge remove a live reservation.
    pub fn check(&self) -> Result<(), IdemError> {
        if self.lease.is_zero() || self.retention <= self.lease {
            return Err(IdemError::Config(format!(
                "the Idempotency-Key retention ({}) must be longer than the reservation's \
                 lease ({}), which must be above zero: a record purged while its request \
                 still runs would let a repeat run beside it",
                idem::config::human(self.retention),
                idem::config::human(self.lease)
            )));
        }
        Ok(())
    }
}

impl IdempotencyLayer {
    /// The layer over an idem store (`Idem::store()`), which holds the records; refused
    /// when [`IdempotencyConfig::check`] refuses the settings.
    pub fn new(
        store: Arc<dyn Store>,
        config: IdempotencyConfig,
    ) -> Result<IdempotencyLayer, IdemError> {
        config.check()?;
        Ok(IdempotencyLayer {
            store,
            config: Arc::new(config),
        })
    }
}

impl<S> tower::Layer<S> for IdempotencyLayer {
    type Service = IdempotencyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService::new(inner, self.store.clone(), self.config.clone())
    }
}
