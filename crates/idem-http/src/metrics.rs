//! Prometheus metrics: the process's `metrics` recorder (every value idem records, see
//! `idem::telemetry::metrics`), rendered as Prometheus text at `GET /metrics`.
//!
//! [`Exporter::start`] installs the recorder (once per process: the `metrics` facade has
//! one global recorder, so a second start shares the first one's) and starts the refresh
//! of the cached gauges (`idem::telemetry::GaugeRefresh`); its [`Exporter::router`] is
//! the `/metrics` route, which an axum app of one's own can merge; [`serve`] runs that
//! route alone on a listener (`idem worker --metrics-listen`).
//!
//! Who may scrape ([`Access`]): by default the operators of the API (Prometheus sends
//! `Authorization: Bearer <token>` with `authorization.credentials` in its scrape
//! config), since queue names and counts describe every principal's work; `Public` for
//! a listener an operator keeps private (a worker's `--metrics-listen`, `idem serve
//! --metrics-public`).

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, State};
use axum::http::header;
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use idem::telemetry::{DEFAULT_GAUGE_INTERVAL, GaugeRefresh};
use idem::{Idem, IdemError};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::api::operator_only;
use crate::auth::{Auth, authenticate};
use crate::principal::Principal;

/// Bucket bounds (seconds) of idem's duration histograms: a millisecond to an hour.
pub const SECONDS_BUCKETS: [f64; 14] = [
    0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0, 300.0, 900.0, 3600.0,
];

/// The content type of Prometheus's text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The recorder installed by this module, shared by every [`Exporter`] of the process.
static INSTALLED: Mutex<Option<PrometheusHandle>> = Mutex::new(None);

/// Who may read `/metrics`.
#[derive(Clone)]
pub enum Access {
    /// Requests that authenticate as an operator of `Auth` (or any under `Auth::Dev`).
    Operators(Auth),
    /// Anyone who can reach the listener.
    Public,
}

/// The process's Prometheus recorder and the refresh of the cached gauges.
pub struct Exporter {
    handle: PrometheusHandle,
    gauges: GaugeRefresh,
}

impl Exporter {
    /// Installs the recorder (or shares the one installed before) and refreshes the
    /// gauges from `idem`'s store every [`DEFAULT_GAUGE_INTERVAL`].
    pub fn start(idem: &Idem) -> Result<Exporter, IdemError> {
        Exporter::start_every(idem, DEFAULT_GAUGE_INTERVAL)
    }

    /// [`Exporter::start`] with the gauges refreshed every `interval`.
    pub fn start_every(idem: &Idem, interval: Duration) -> Result<Exporter, IdemError> {
        let handle = recorder()?;
        let gauges = GaugeRefresh::start(idem, interval);
        Ok(Exporter { handle, gauges })
    }

    /// The recorder's handle (to render it elsewhere).
    pub fn handle(&self) -> &PrometheusHandle {
        &self.handle
    }

    /// The gauge refresher (its `refreshes` tell when a refresh finished).
    pub fn gauges(&self) -> &GaugeRefresh {
        &self.gauges
    }

    /// `GET /metrics` for `access`, to merge into a router.
    pub fn router(&self, access: Access) -> Router {
        route(self.handle.clone(), access)
    }

    /// Stops the gauge refresher.
    pub async fn stop(self) {
        self.gauges.stop().await;
    }
}

/// The process's recorder: installed on the first call, with idem's metrics described
/// and its histograms in [`SECONDS_BUCKETS`]; refused when another crate installed a
/// `metrics` recorder of its own first.
pub fn recorder() -> Result<PrometheusHandle, IdemError> {
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(handle) = installed.as_ref() {
        return Ok(handle.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS_BUCKETS)
        .and_then(|b| b.install_recorder())
        .map_err(|e| {
            IdemError::Config(format!(
                "cannot install idem's Prometheus recorder: {e}; a process has one `metrics` \
                 recorder, so render the one installed first instead"
            ))
        })?;
    idem::telemetry::metrics::describe();
    *installed = Some(handle.clone());
    Ok(handle)
}

/// `GET /metrics` rendering `handle`, for `access`.
pub fn route(handle: PrometheusHandle, access: Access) -> Router {
    let open = Router::new().route("/metrics", get(render));
    let routes = match access {
        Access::Public => open.route_layer(Extension(Principal::operator("public"))),
        Access::Operators(auth) => open.route_layer(from_fn_with_state(auth, authenticate)),
    };
    routes.with_state(handle)
}

/// Serves `GET /metrics` (public) on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    handle: PrometheusHandle,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = route(handle, Access::Public);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn render(
    State(handle): State<PrometheusHandle>,
    Extension(principal): Extension<Principal>,
) -> Response {
    if !principal.is_operator() {
        return operator_only("reading /metrics").into_response();
    }
    // Histograms are kept in buckets: upkeep only trims what the recorder holds.
    handle.run_upkeep();
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], handle.render()).into_response()
}
