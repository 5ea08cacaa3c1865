//! Purges on the client: records past their retention (enqueue keys, effect keys,
//! intents, finished and dead jobs, finished batches) deleted in bounded batches, for operators (`idem purge`)
//! and for the purge service.
//!
//! What must stay true: the cutoff is now (the client's clock, else the database's)
//! minus the target's retention window, so dedup records go only once older than their
//! window, and effect data (ledger entries, counter numbers) is never touched; each
//! batch is its own short transaction, oldest first.

use idem_store::{LeaderToken, Purge, PurgeTarget, Timestamp};

use crate::client::Idem;
use crate::error::IdemError;

/// Records one purge statement deletes.
pub const DEFAULT_PURGE_BATCH: u32 = 1000;

impl Idem {
    /// Records of `target` created (keys) or finalized (jobs) before this time are past
    /// their retention: now (the client's clock, else the database's) minus the window.
    pub async fn purge_cutoff(&self, target: PurgeTarget) -> Result<Timestamp, IdemError> {
        let now = self.now().await?;
        let r = &self.retention;
        let window = match target {
            PurgeTarget::EnqueueKeys => r.enqueue_keys,
            PurgeTarget::EffectKeys => r.effect_keys,
            PurgeTarget::Intents => r.intents,
            PurgeTarget::FinishedJobs => r.finished_jobs,
            PurgeTarget::DeadJobs => r.dead_jobs,
            PurgeTarget::HttpKeys => r.http_keys,
            PurgeTarget::Batches => r.finished_jobs,
        };
        let window = chrono::Duration::from_std(window).map_err(|_| {
            IdemError::Config(format!("the {target} retention is too long to compute"))
        })?;
        Ok(now - window)
    }

    /// How many records of `target` a purge with cutoff `before` would delete.
    pub async fn purge_count(
        &self,
        target: PurgeTarget,
        before: Timestamp,
    ) -> Result<u64, IdemError> {
        Ok(self.store.purge_count(target, before).await?)
    }

    /// Deletes every record of `target` past its retention ([`Idem::purge_cutoff`]),
    /// `batch` at a time (each batch its own short transaction), calling `progress` with
    /// each batch's count; returns the total. Dedup records younger than their window and
    /// effect data are never touched.
    pub async fn purge(
        &self,
        target: PurgeTarget,
        batch: u32,
        progress: impl FnMut(u64),
    ) -> Result<u64, IdemError> {
        let before = self.purge_cutoff(target).await?;
        self.purge_before(target, before, batch, progress).await
    }

    /// [`Idem::purge`] with the cutoff given: a caller that counted with
    /// [`Idem::purge_count`] deletes what it counted.
    pub async fn purge_before(
        &self,
        target: PurgeTarget,
        before: Timestamp,
        batch: u32,
        progress: impl FnMut(u64),
    ) -> Result<u64, IdemError> {
        self.purge_while(target, before, batch, None, progress, || true)
            .await
    }

    /// [`Idem::purge_before`] that stops between batches once `go_on` says so (a worker
    /// shutting down); made for the maintenance leader `leader` when given, each batch
    /// in a transaction that first checks the leadership (refused with
    /// `LeadershipLost`).
    pub(crate) async fn purge_while(
        &self,
        target: PurgeTarget,
        before: Timestamp,
        batch: u32,
        leader: Option<&LeaderToken>,
        mut progress: impl FnMut(u64),
        go_on: impl Fn() -> bool,
    ) -> Result<u64, IdemError> {
        if batch == 0 {
            return Err(IdemError::Config(
                "purge batch is 0; it must be at least 1".into(),
            ));
        }
        let mut total = 0;
        while go_on() {
            let params = Purge {
                target,
                before,
                limit: batch,
            };
            let n = match leader {
                None => self.store.purge(params).await?,
                Some(token) => {
                    let mut tx = self.led_tx(token).await?;
                    let n = tx.purge(params).await?;
                    tx.commit().await?;
                    n
                }
            };
            total += n;
            crate::telemetry::metrics::purged(target, n);
            progress(n);
            if n < u64::from(batch) {
                break;
            }
        }
        Ok(total)
    }
}
