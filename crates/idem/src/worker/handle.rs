//! [`WorkerHandle`]: a running worker, what it did so far, and its graceful shutdown,
//! on demand, when a future resolves, or on SIGTERM/SIGINT.
//!
//! What must stay true: shutdown goes in order. Claims (and the maintenance services)
//! stop first and local enqueues no longer hand jobs over; running jobs get up to the
//! shutdown timeout to finish, then are stopped (their attempts fail and run again
//! later); the heartbeat and the completer stop last, so a job finishing during
//! shutdown keeps its lease and gets its completion written.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::listener::Listening;
use super::{Shared, WorkerReport};

/// A running worker.
pub struct WorkerHandle {
    pub(super) shared: Arc<Shared>,
    pub(super) claim_tasks: Vec<JoinHandle<()>>,
    pub(super) upkeep_tasks: Vec<JoinHandle<()>>,
    pub(super) stop_claims: watch::Sender<bool>,
    pub(super) stop_upkeep: watch::Sender<bool>,
}

impl WorkerHandle {
    /// What the worker did so far.
    pub fn report(&self) -> WorkerReport {
        self.shared.stats.report()
    }

    /// The worker's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Resolves once every queue has had its first claim answered and the worker hears
    /// announcements of new jobs from other processes (on a store with a channel; where
    /// there is none, or the store finds it cannot use it, workers poll).
    pub async fn ready(&self) {
        let queues = self.shared.config.queues.len();
        let mut claimed = self.shared.first_claims.subscribe();
        let _ = claimed.wait_for(|n| *n >= queues).await;
        if self.shared.idem.store.has_channel() {
            let mut listening = self.shared.listening.subscribe();
            let _ = listening.wait_for(|l| *l != Listening::Waiting).await;
        }
    }

    /// Stops claiming, lets running jobs finish for up to the shutdown timeout, then
    /// stops the rest (their attempts fail and they run again later) and returns the
    /// final report.
    pub async fn shutdown(self) -> WorkerReport {
        self.shared.accepting.store(false, Ordering::Release);
        let _ = self.stop_claims.send(true);
        for t in self.claim_tasks {
            let _ = t.await;
        }
        let timeout = self.shared.config.shutdown_timeout;
        if tokio::time::timeout(timeout, self.shared.wait_idle())
            .await
            .is_err()
        {
            tracing::warn!(worker = %self.shared.name, "shutdown timeout reached; stopping running jobs");
            self.shared.abort_all();
            self.shared.wait_idle().await;
        }
        let _ = self.stop_upkeep.send(true);
        for t in self.upkeep_tasks {
            let _ = t.await;
        }
        self.shared.stats.report()
    }

    /// Runs until `stop` resolves (whatever its output), then shuts down as
    /// [`WorkerHandle::shutdown`] does and returns the final report. The worker keeps
    /// claiming and running jobs meanwhile.
    ///
    /// ```
    /// # use idem::{Idem, WorkerConfig};
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let idem = Idem::connect(&format!("sqlite://{}/idem.db", dir.path().display())).await?;
    /// let worker = idem.worker(WorkerConfig::default())?;
    /// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// let running = tokio::spawn(worker.start().shutdown_when(stopped));
    /// // … the application decides it is time to stop:
    /// let _ = stop.send(());
    /// let report = running.await?;
    /// assert_eq!(report.claimed, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn shutdown_when(self, stop: impl Future) -> WorkerReport {
        stop.await;
        self.shutdown().await
    }

    /// Runs until the process receives SIGTERM or SIGINT (Ctrl-C; only Ctrl-C off
    /// Unix), then shuts down gracefully as [`WorkerHandle::shutdown`] does and returns
    /// the final report: the usual end of a worker process under a supervisor (systemd,
    /// Kubernetes, a terminal).
    ///
    /// The signal handlers are installed when the returned future is first polled;
    /// until then the signals keep their default action (ending the process). Should
    /// they fail to install, the error is logged and the worker shuts down at once
    /// rather than run on deaf to its stop signal.
    ///
    /// ```no_run
    /// use idem::{Idem, WorkerConfig};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), idem::IdemError> {
    /// let idem = Idem::connect("sqlite://idem.db").await?;
    /// let worker = idem.worker(WorkerConfig::default())?;
    /// // worker.register(…)?;
    /// let report = worker.start().shutdown_on_signal().await;
    /// println!("stopped after {} jobs", report.completed);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn shutdown_on_signal(self) -> WorkerReport {
        let name = self.shared.name.clone();
        match stop_signal() {
            Ok(signal) => {
                let heard = async {
                    let signal = signal.await;
                    tracing::info!(worker = %name, signal, "stop signal received; shutting down");
                };
                self.shutdown_when(heard).await
            }
            Err(e) => {
                tracing::error!(worker = %name, error = %e, "cannot listen for SIGTERM/SIGINT; shutting down");
                self.shutdown().await
            }
        }
    }
}

/// Listens for SIGTERM and SIGINT from now on; the future resolves to the name of the
/// first one received.
#[cfg(unix)]
fn stop_signal() -> std::io::Result<impl Future<Output = &'static str>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    })
}

/// Listens for Ctrl-C once polled; the future resolves when it arrives (or listening
/// failed, which is logged).
#[cfg(not(unix))]
fn stop_signal() -> std::io::Result<impl Future<Output = &'static str>> {
    Ok(async {
        match tokio::signal::ctrl_c().await {
            Ok(()) => "Ctrl-C",
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for Ctrl-C");
                "none (listening failed)"
            }
        }
    })
}
