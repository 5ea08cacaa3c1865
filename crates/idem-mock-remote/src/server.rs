//! The HTTP server: the router, its task, and the one way a handler answers with a bare
//! status.
//!
//! The server stops accepting when the remote stops; every request still in flight
//! (hung, gated, delayed) is woken by the same signal, so the task always ends.

use std::io;
use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::log::LogEntry;
use crate::shared::Shared;
use crate::{apply, lookup};

/// Serves the remote's routes on `listener` until [`Shared::stop`].
pub(crate) fn spawn(listener: TcpListener, shared: Arc<Shared>) -> JoinHandle<io::Result<()>> {
    let app = Router::new()
        .route("/effects", post(apply::handle).get(lookup::handle))
        .with_state(Arc::clone(&shared));
    let stopped = async move { shared.stopped().await };
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(stopped)
            .await
    })
}

/// Logs the request with `status` and answers it with an empty body.
pub(crate) fn answer(shared: &Shared, mut entry: LogEntry, status: u16) -> Response {
    entry.status = Some(status);
    shared.record(entry);
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    code.into_response()
}
