//! The web dashboard of `idem serve` (DESIGN.md section 10): server-rendered pages at
//! `/` for operators, refreshed live by a small script, behind the API's tokens.
//!
//! - Who: a token login opens a server-side session (cookie `idem_session`); only
//!   operator principals may log in, since every page spans all principals' jobs (a
//!   client principal is refused and uses the API, which scopes it). `--dev` opens a
//!   session for the operator `dev` on the first page read, as the API acts as `dev`.
//! - Actions are `POST`s with the session's CSRF token ([`csrf::Action`]); a request
//!   without both is refused before anything runs.
//! - Every answer carries a strict Content-Security-Policy ([`layout::secure`]); every
//!   value is escaped by `maud`.
//! - Counts are cheap: queue counts are read at most once per interval for every browser
//!   together, and throughput from the finalized-time index ([`stats`]).
//!
//! One file per job: `session.rs`, `login.rs`, `csrf.rs`, `layout.rs`, `stats.rs`
//! (counts and sparklines), `assets.rs`, and one per page (`queues.rs`, `jobs.rs`,
//! `job.rs`, `dead.rs`, `intents.rs`, `batches.rs`, `guarantees.rs`, `ledger.rs`).

mod assets;
mod batches;
mod csrf;
mod dead;
mod guarantees;
mod intents;
mod job;
mod jobs;
mod layout;
mod ledger;
mod login;
mod queues;
mod session;
mod stats;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware::{from_fn, from_fn_with_state};
use axum::routing::{get, post};
use idem::{EffectClass, Idem};
use idem_store::Timestamp;

use crate::api::Limits;
use crate::auth::Auth;

pub use layout::CSP;
pub use session::{COOKIE, SESSION_TTL};

/// The largest form a dashboard action takes (a bulk action's ids included).
const MAX_FORM: usize = 64 * 1024;

/// Everything the dashboard is built from.
pub struct Dashboard {
    /// The client (its store and clock).
    pub idem: Idem,
    /// How operators log in: the API's tokens, or `--dev`.
    pub auth: Auth,
    /// The job kinds this server runs and their effect classes (the guarantees page).
    pub kinds: Vec<(String, EffectClass)>,
    /// The request limits (shared with the API when cloned from its).
    pub limits: Limits,
}

/// What every page shares.
#[derive(Clone)]
pub(crate) struct DashState {
    idem: Idem,
    auth: Auth,
    sessions: Arc<session::Sessions>,
    kinds: Arc<Vec<(String, EffectClass)>>,
    stats: Arc<stats::Stats>,
    ledger: Arc<ledger::LastCheck>,
}

impl DashState {
    /// Now on the client's clock (injected in tests), for sessions.
    fn now(&self) -> Timestamp {
        session::now_of(self.idem.clock())
    }
}

impl Dashboard {
    /// The dashboard's routes with their layers; merge it into the API's router. Starts
    /// the throughput sampler when called inside a Tokio runtime.
    pub fn router(self) -> Router {
        let state = DashState {
            stats: stats::Stats::start(self.idem.clone()),
            idem: self.idem,
            auth: self.auth,
            sessions: Arc::default(),
            kinds: Arc::new(self.kinds),
            ledger: Arc::default(),
        };
        let pages = Router::new()
            .route("/", get(queues::page))
            .route("/queues/pause", post(queues::pause))
            .route("/jobs", get(jobs::page))
            .route("/jobs/{id}", get(job::page))
            .route("/jobs/{id}/confirm", get(job::confirm))
            .route("/jobs/{id}/action", post(job::act))
            .route("/dead", get(dead::page))
            .route("/dead/preview", get(dead::preview))
            .route("/dead/bulk", post(dead::bulk))
            .route("/intents", get(intents::page))
            .route("/intents/resolve", post(intents::resolve))
            .route("/batches", get(batches::page))
            .route("/guarantees", get(guarantees::page))
            .route("/ledger", get(ledger::page))
            .route("/ledger/check", post(ledger::check))
            .route("/logout", post(login::logout))
            .layer(from_fn_with_state(state.clone(), session::require));
        Router::new()
            .merge(pages)
            .route("/login", get(login::form).post(login::submit))
            .route("/assets/dashboard.css", get(assets::css))
            .route("/assets/dashboard.js", get(assets::js))
            .with_state(state)
            .layer(DefaultBodyLimit::max(MAX_FORM))
            .layer(from_fn(layout::secure))
            .layer(from_fn_with_state(
                Arc::new(self.limits),
                crate::api::enforce_limits,
            ))
    }
}
