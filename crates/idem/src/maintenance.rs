//! Operator and maintenance actions on the client: dead-letter retry and discard (one
//! job, a list, or every dead job matching filters), and purges of records past their
//! retention in bounded batches.

use idem_store::{JobDiscard, JobList, JobRetry, JobRow, JobState, Purge, PurgeTarget, Timestamp};

use crate::client::Idem;
use crate::error::IdemError;

/// Jobs one page of a bulk action reads and changes.
pub const BULK_PAGE: u32 = 1000;
/// Records one purge statement deletes.
pub const DEFAULT_PURGE_BATCH: u32 = 1000;

/// Which dead jobs a bulk action takes; empty = every dead job.
#[derive(Debug, Clone, Default)]
pub struct DeadFilter {
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this kind.
    pub kind: Option<String>,
}

impl Idem {
    /// Puts dead or cancelled jobs back to `available` with a fresh ladder (attempt 0);
    /// their attempt history is kept. Jobs in other states are left alone and absent
    /// from the result. A long list goes [`BULK_PAGE`] jobs per statement.
    pub async fn retry_jobs(&self, ids: Vec<i64>) -> Result<Vec<JobRow>, IdemError> {
        let mut retried = Vec::new();
        for page in ids.chunks(BULK_PAGE as usize) {
            let params = JobRetry {
                ids: page.to_vec(),
                now: self.clock.now(),
            };
            let rows = self.store.job_retry(params).await?;
            self.jobs_waiting(rows.iter().map(|r| r.queue.as_str()));
            retried.extend(rows);
        }
        Ok(retried)
    }

    /// Deletes dead jobs with their attempt history and enqueue keys (a producer may
    /// enqueue the same key again). Jobs not dead are left alone and absent from the
    /// result. A long list goes [`BULK_PAGE`] jobs per statement.
    pub async fn discard_jobs(&self, ids: Vec<i64>) -> Result<Vec<i64>, IdemError> {
        let mut gone = Vec::new();
        for page in ids.chunks(BULK_PAGE as usize) {
            let params = JobDiscard { ids: page.to_vec() };
            gone.extend(self.store.job_discard(params).await?);
        }
        Ok(gone)
    }

    /// The ids of every dead job matching `filter`, newest first.
    pub async fn dead_ids(&self, filter: &DeadFilter) -> Result<Vec<i64>, IdemError> {
        let mut ids = Vec::new();
        let mut before_id = None;
        loop {
            let page = self
                .store
                .job_list(JobList {
                    state: Some(JobState::Dead),
                    queue: filter.queue.clone(),
                    kind: filter.kind.clone(),
                    before_id,
                    limit: BULK_PAGE,
                })
                .await?;
            let Some(last) = page.last() else { break };
            before_id = Some(last.id);
            ids.extend(page.iter().map(|j| j.id));
        }
        Ok(ids)
    }

    /// Retries every dead job matching `filter`; returns how many.
    pub async fn retry_dead(&self, filter: &DeadFilter) -> Result<u64, IdemError> {
        let ids = self.dead_ids(filter).await?;
        Ok(self.retry_jobs(ids).await?.len() as u64)
    }

    /// Discards every dead job matching `filter`; returns how many.
    pub async fn discard_dead(&self, filter: &DeadFilter) -> Result<u64, IdemError> {
        let ids = self.dead_ids(filter).await?;
        Ok(self.discard_jobs(ids).await?.len() as u64)
    }

    /// Records of `target` created (keys) or finalized (jobs) before this time are past
    /// their retention: now (the client's clock, else the database's) minus the window.
    pub async fn purge_cutoff(&self, target: PurgeTarget) -> Result<Timestamp, IdemError> {
        let now = match self.clock.now() {
            Some(t) => t,
            None => self.store.now().await?,
        };
        let r = &self.retention;
        let window = match target {
            PurgeTarget::EnqueueKeys => r.enqueue_keys,
            PurgeTarget::EffectKeys => r.effect_keys,
            PurgeTarget::FinishedJobs => r.finished_jobs,
            PurgeTarget::DeadJobs => r.dead_jobs,
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
        self.purge_while(target, before, batch, progress, || true)
            .await
    }

    /// [`Idem::purge_before`] that stops between batches once `go_on` says so (a worker
    /// shutting down).
    pub(crate) async fn purge_while(
        &self,
        target: PurgeTarget,
        before: Timestamp,
        batch: u32,
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
            let limit = batch;
            let n = self
                .store
                .purge(Purge {
                    target,
                    before,
                    limit,
                })
                .await?;
            total += n;
            progress(n);
            if n < u64::from(batch) {
                break;
            }
        }
        Ok(total)
    }
}
