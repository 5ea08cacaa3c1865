//! `idem worker --metrics-listen ADDR`: the worker process's Prometheus metrics at
//! `GET /metrics` on a listener of its own (no API in this process), with the cached
//! job and intent gauges refreshed beside it.
//!
//! What must stay true: the listener is bound before the worker starts, so a taken
//! address stops the command at once (exit 4, unavailable) instead of running a worker
//! nobody can see; the route has no authentication, so the address is the operator's to
//! keep private (loopback, or a network only Prometheus reaches).

use std::net::SocketAddr;

use anyhow::Context;
use idem::Idem;
use idem_http::metrics::{self, Exporter};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::exit::{Exit, OrExit};

/// The running `/metrics` listener.
pub struct MetricsListener {
    exporter: Exporter,
    stop: watch::Sender<bool>,
    task: JoinHandle<std::io::Result<()>>,
}

impl MetricsListener {
    /// Binds `addr` and serves `/metrics` for `idem`'s process.
    pub async fn start(idem: &Idem, addr: SocketAddr) -> anyhow::Result<MetricsListener> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("--metrics-listen: cannot listen on {addr}"))
            .or_exit(Exit::Unavailable)?;
        let exporter = Exporter::start(idem).or_exit(Exit::Config)?;
        let (stop, mut stopped) = watch::channel(false);
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        let handle = exporter.handle().clone();
        let task = tokio::spawn(metrics::serve(listener, handle, shutdown));
        Ok(MetricsListener {
            exporter,
            stop,
            task,
        })
    }

    /// Stops the listener and the gauge refresh.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        if let Ok(Err(e)) = self.task.await {
            eprintln!("the metrics listener stopped with an error: {e}");
        }
        self.exporter.stop().await;
    }
}
