//! [`WorkerHandle`]: a running worker, what it did so far, and its graceful shutdown.
//!
//! What must stay true: shutdown goes in order. Claims (and the maintenance services)
//! stop first and local enqueues no longer hand jobs over; running jobs get up to the
//! shutdown timeout to finish, then are stopped (their attempts fail and run again
//! later); the heartbeat and the completer stop last, so a job finishing during
//! shutdown keeps its lease and gets its completion written.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::watch;
use tokio::task::JoinHandle;

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
    /// there is none, workers poll).
    pub async fn ready(&self) {
        let queues = self.shared.config.queues.len();
        let mut claimed = self.shared.first_claims.subscribe();
        let _ = claimed.wait_for(|n| *n >= queues).await;
        if self.shared.idem.store.has_channel() {
            let mut listening = self.shared.listening.subscribe();
            let _ = listening.wait_for(|l| *l).await;
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
}
