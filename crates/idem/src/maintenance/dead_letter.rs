//! Dead-letter actions on the client, for operators: retry and discard of one job, a
//! list, or every dead job matching filters.
//!
//! What must stay true: only dead (or, for a retry, cancelled) jobs change; a job in any
//! other state is left alone and absent from the result. A retry starts a fresh ladder
//! and keeps the attempt history; a discard deletes the job with its history and its
//! enqueue key, so the key is free again. Lists go [`BULK_PAGE`] jobs per statement.

use idem_store::{JobDiscard, JobList, JobRetry, JobRow, JobState};

use crate::client::Idem;
use crate::error::IdemError;

/// Jobs one page of a bulk action reads and changes.
pub const BULK_PAGE: u32 = 1000;

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
}
