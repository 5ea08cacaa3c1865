//! The rescue service: while its process leads the maintenance duties (`elector.rs`),
//! every `interval` it moves running jobs whose lease expired back to `retryable` (or
//! `dead` once their attempts are used up), so a job whose worker died or stalled runs
//! again under a higher fence. Each sweep is fenced by the leadership it was made under.
//!
//! What must stay true: a lease's expiry is judged on the database clock (the client's
//! injected clock in tests), never on a worker's; a job whose effect transaction is
//! open is not rescued under it (PostgreSQL skips its locked row, SQLite's single
//! writer makes the sweep wait); and with the owner's `max_attempts` as the cap, a job
//! enqueued with more attempts still reaches `dead` within the retry horizon.

use std::time::Duration;

use idem_store::LeaderToken;
use tokio::sync::watch;

use super::elector;
use crate::client::Idem;

/// The rescue service, as its owner configures it.
pub(crate) struct Rescuer {
    /// The client whose store is swept.
    pub(crate) idem: Idem,
    /// The owner's cap on attempts: a rescued job that used this many (or its own
    /// `max_attempts`, when lower) is `dead`; `None` = no cap.
    pub(crate) max_attempts: Option<i32>,
    /// Time between sweeps.
    pub(crate) interval: Duration,
    /// Who runs the service (a worker's name), for its logs.
    pub(crate) owner: String,
}

impl Rescuer {
    /// Sweeps while `leading` holds this process's maintenance leadership: at once when
    /// elected, then every `interval`, until `stop` changes; `rescued` is told how many
    /// jobs each sweep that found some moved.
    pub(crate) async fn run(
        self,
        mut stop: watch::Receiver<bool>,
        mut leading: watch::Receiver<Option<LeaderToken>>,
        rescued: impl Fn(u64),
    ) {
        while let Some(token) = elector::led(&mut leading, &mut stop).await {
            let n = self.sweep(&token).await;
            if n > 0 {
                rescued(n);
            }
            tokio::select! {
                _ = tokio::time::sleep(self.interval) => {},
                _ = stop.changed() => return,
            }
        }
    }

    /// One sweep for the leader `token`; returns how many jobs it moved (a failure is
    /// logged, and counts none).
    async fn sweep(&self, token: &LeaderToken) -> u64 {
        match self
            .idem
            .rescue_capped(self.max_attempts, Some(token))
            .await
        {
            Ok(rows) if !rows.is_empty() => {
                tracing::info!(worker = %self.owner, rescued = rows.len(), "rescued expired leases");
                rows.len() as u64
            }
            Ok(_) => 0,
            Err(e) if elector::lost(&e) => {
                tracing::info!(worker = %self.owner, error = %e, "rescue refused: no longer the maintenance leader");
                0
            }
            Err(e) => {
                tracing::warn!(worker = %self.owner, error = %e, "rescue failed");
                0
            }
        }
    }
}
