//! The purge service: while its process leads the maintenance duties (`elector.rs`),
//! every `interval` it deletes the records past their retention (enqueue keys, effect
//! keys, finished and dead jobs), each target in batches of [`DEFAULT_PURGE_BATCH`],
//! through `Idem::purge_while`, each batch fenced by the leadership it was made under.
//!
//! What must stay true: it deletes only what `Idem::purge_cutoff` puts past the
//! client's retention windows (dedup records only once older than their window; ledger
//! entries and counter numbers never), each batch its own short transaction; and a
//! stop is heard between batches, so a large backlog never holds up a shutdown.

use std::time::Duration;

use idem_store::{LeaderToken, PurgeTarget};
use tokio::sync::watch;

use super::{DEFAULT_PURGE_BATCH, elector};
use crate::client::Idem;
use crate::error::IdemError;

/// The purge service, as its owner configures it.
pub(crate) struct Purger {
    /// The client whose store is purged, with its retention windows.
    pub(crate) idem: Idem,
    /// Time between purges.
    pub(crate) interval: Duration,
    /// Who runs the service (a worker's name), for its logs.
    pub(crate) owner: String,
}

impl Purger {
    /// Deletes records past their retention every `interval`, in bounded batches, while
    /// `leading` holds this process's maintenance leadership, until `stop` changes.
    pub(crate) async fn run(
        self,
        mut stop: watch::Receiver<bool>,
        mut leading: watch::Receiver<Option<LeaderToken>>,
    ) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.interval) => {},
                _ = stop.changed() => return,
            }
            let Some(token) = elector::led(&mut leading, &mut stop).await else {
                return;
            };
            for target in PurgeTarget::ALL {
                match self.purge(target, &token, &stop).await {
                    Ok(0) => {}
                    Ok(n) => {
                        tracing::info!(worker = %self.owner, %target, purged = n, "purged records past their retention")
                    }
                    Err(e) if elector::lost(&e) => {
                        tracing::info!(worker = %self.owner, %target, error = %e, "purge refused: no longer the maintenance leader");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(worker = %self.owner, %target, error = %e, "purge failed")
                    }
                }
            }
        }
    }

    /// Purges `target` up to its cutoff for the leader `token`; returns how many records
    /// went.
    async fn purge(
        &self,
        target: PurgeTarget,
        token: &LeaderToken,
        stop: &watch::Receiver<bool>,
    ) -> Result<u64, IdemError> {
        let before = self.idem.purge_cutoff(target).await?;
        // A large backlog goes in many batches; shutdown does not wait for all of them.
        let go_on = || !*stop.borrow();
        let batch = DEFAULT_PURGE_BATCH;
        self.idem
            .purge_while(target, before, batch, Some(token), |_| {}, go_on)
            .await
    }
}
