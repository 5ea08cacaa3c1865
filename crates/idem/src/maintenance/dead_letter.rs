//! Dead-letter actions on the client, for operators: retry and discard of one job, a
//! list, or every dead job matching filters.
//!
//! What must stay true: only dead (or, for a retry, cancelled) jobs change; a job in any
//! other state is left alone and absent from the result. A retry starts a fresh ladder
//! with no snoozes and keeps the attempt history; a discard deletes the job with its
//! history and its enqueue key, so the key is free again. Lists go [`BULK_PAGE`] jobs per
//! statement.
//!
//! **A retry never outlives the effect keys of a job's first attempt unless forced.** A
//! retried job may run until now + the retry horizon; the keys its first attempt made
//! expire at that attempt's start + the effect-key retention. A retry of a job for which
//! `first attempt + retention < now + horizon + margin` would let a late attempt find its
//! keys purged and repeat their effects, so [`Idem::retry_jobs`] refuses the whole call
//! ([`RetryRefused`]) and retries nothing: the operator sees every job that is too old,
//! and no call retries half of what was asked. The retry and the check share one
//! transaction, so the jobs judged are the very jobs retried. A job that never ran has
//! no keys and is never refused. [`Idem::retry_jobs_forced`] skips the check.

use std::time::Duration;

use idem_store::{JobDiscard, JobList, JobRetry, JobRow, JobState, Timestamp};

use crate::client::Idem;
use crate::config::{HORIZON_MARGIN, Horizon, ceil_to_second, human};
use crate::error::IdemError;

/// Jobs one page of a bulk action reads and changes.
pub const BULK_PAGE: u32 = 1000;

/// Jobs a refusal names one by one; the rest are counted.
const NAMED_JOBS: usize = 10;

/// Which dead jobs a bulk action takes; empty = every dead job.
#[derive(Debug, Clone, Default)]
pub struct DeadFilter {
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this kind.
    pub kind: Option<String>,
}

/// An operator retry refused because the jobs' first attempts are too old: a retried
/// job could still be running when the effect keys of its first attempt are purged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct RetryRefused {
    /// Each refused job with how long ago its first attempt started, in id order.
    pub jobs: Vec<(i64, Duration)>,
    /// The effect-key retention (`Retention::effect_keys`).
    pub effect_keys: Duration,
    /// The retry horizon a retried job may run for (`Idem::horizon`).
    pub horizon: Horizon,
}

impl RetryRefused {
    /// How old a first attempt may be for its job to be retried without force
    /// ([`Horizon::retry_allowance`]).
    pub fn allowance(&self) -> Option<Duration> {
        self.horizon.retry_allowance(self.effect_keys)
    }

    /// `job 12 first ran 2d 1h ago, …` (ages rounded up to the second), the first
    /// [`NAMED_JOBS`] and a count of the rest.
    fn named_jobs(&self) -> String {
        let mut named: Vec<String> = self
            .jobs
            .iter()
            .take(NAMED_JOBS)
            .map(|(id, age)| {
                let age = human(ceil_to_second(*age));
                format!("job {id} first ran {age} ago")
            })
            .collect();
        if self.jobs.len() > NAMED_JOBS {
            named.push(format!("and {} more", self.jobs.len() - NAMED_JOBS));
        }
        named.join(", ")
    }
}

impl std::fmt::Display for RetryRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let safe = match self.allowance() {
            Some(a) => format!(
                "so a job can be retried safely only if its first attempt started at most {} \
                 ago",
                human(a)
            ),
            None => "which is shorter than the two, so no job that has run can be retried \
                     safely"
                .into(),
        };
        write!(
            f,
            "refusing to retry {} job(s) whose first attempt's effect keys could be purged \
             before the retry ends: {}. A retried job may run for the retry horizon {} plus \
             the {} margin, and the effect-key retention {} counts from the first attempt, \
             {safe}. Nothing was retried. Retry the younger jobs alone, or force the retry \
             (`idem dead retry --force`, `Idem::retry_jobs_forced`) if repeating the \
             effects of those first attempts is acceptable",
            self.jobs.len(),
            self.named_jobs(),
            human(self.horizon.total),
            human(HORIZON_MARGIN),
            human(self.effect_keys),
        )
    }
}

impl Idem {
    /// Puts dead or cancelled jobs back to `available` with a fresh ladder (attempt 0, no
    /// snoozes); their attempt history is kept. Jobs in other states are left alone and
    /// absent from the result. A long list goes [`BULK_PAGE`] jobs per statement, all in
    /// one transaction.
    ///
    /// Refused with [`IdemError::RetryRefused`], retrying none of `ids`, when any job to
    /// retry first ran longer ago than the effect-key retention minus this client's
    /// retry horizon ([`Idem::with_horizon`]) and [`HORIZON_MARGIN`]: it could run past
    /// the window of its first attempt's effect keys and repeat their effects. Now is the
    /// client's clock, else the database's. [`Idem::retry_jobs_forced`] skips the check.
    pub async fn retry_jobs(&self, ids: Vec<i64>) -> Result<Vec<JobRow>, IdemError> {
        self.retry(ids, false).await
    }

    /// [`Idem::retry_jobs`] without the check on the effect-key window: a job whose
    /// first attempt is older than the window allows may repeat effects whose keys have
    /// been purged. For an operator who has checked that those effects may happen again.
    pub async fn retry_jobs_forced(&self, ids: Vec<i64>) -> Result<Vec<JobRow>, IdemError> {
        self.retry(ids, true).await
    }

    /// Retries `ids` in one transaction, checked unless `forced`. What the check reads
    /// (the jobs' first attempts, which never change, and the clock) is read before the
    /// transaction opens, so a retry needs one connection: with a pool of one, a read
    /// beside the open transaction would wait for itself.
    async fn retry(&self, ids: Vec<i64>, forced: bool) -> Result<Vec<JobRow>, IdemError> {
        let checked = match forced {
            true => None,
            false => Some((self.first_attempts(&ids).await?, self.now().await?)),
        };
        let mut tx = self.store.begin().await?;
        let mut retried = Vec::new();
        for page in ids.chunks(BULK_PAGE as usize) {
            let params = JobRetry {
                ids: page.to_vec(),
                now: self.clock.now(),
            };
            retried.extend(tx.job_retry(params).await?);
        }
        let verdict = match checked {
            None => Ok(()),
            Some((first, now)) => self.check_retry(&retried, first, now),
        };
        match verdict {
            Ok(()) => tx.commit().await?,
            Err(refused) => {
                tx.rollback().await?;
                return Err(refused);
            }
        }
        self.jobs_waiting(retried.iter().map(|r| r.queue.as_str()));
        Ok(retried)
    }

    /// Refuses `jobs` when any first ran too long ago, at `now`, for the effect-key window
    /// to cover a new retry horizon; `first` holds the first attempts' starts, by job.
    fn check_retry(
        &self,
        jobs: &[JobRow],
        first: Vec<(i64, Timestamp)>,
        now: Timestamp,
    ) -> Result<(), IdemError> {
        let retried: std::collections::HashSet<i64> = jobs.iter().map(|j| j.id).collect();
        let (effect_keys, horizon) = (self.retention.effect_keys, self.horizon);
        let allowed = horizon.retry_allowance(effect_keys);
        let too_old: Vec<(i64, Duration)> = first
            .into_iter()
            .filter(|(id, _)| retried.contains(id))
            .map(|(id, started)| (id, (now - started).to_std().unwrap_or(Duration::ZERO)))
            .filter(|(_, age)| allowed.is_none_or(|a| *age > a))
            .collect();
        if too_old.is_empty() {
            return Ok(());
        }
        Err(IdemError::RetryRefused(Box::new(RetryRefused {
            jobs: too_old,
            effect_keys,
            horizon,
        })))
    }

    /// When the first attempt of each of `ids` that ran started.
    async fn first_attempts(&self, ids: &[i64]) -> Result<Vec<(i64, Timestamp)>, IdemError> {
        let mut first = Vec::new();
        for page in ids.chunks(BULK_PAGE as usize) {
            first.extend(self.store.job_first_attempts(page.to_vec()).await?);
        }
        Ok(first)
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
                    principal: None,
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

    /// Retries every dead job matching `filter` ([`Idem::retry_jobs`], refused as a
    /// whole when any is too old); returns how many.
    pub async fn retry_dead(&self, filter: &DeadFilter) -> Result<u64, IdemError> {
        let ids = self.dead_ids(filter).await?;
        Ok(self.retry_jobs(ids).await?.len() as u64)
    }

    /// Retries every dead job matching `filter` without the check on the effect-key
    /// window ([`Idem::retry_jobs_forced`]); returns how many.
    pub async fn retry_dead_forced(&self, filter: &DeadFilter) -> Result<u64, IdemError> {
        let ids = self.dead_ids(filter).await?;
        Ok(self.retry_jobs_forced(ids).await?.len() as u64)
    }

    /// Discards every dead job matching `filter`; returns how many.
    pub async fn discard_dead(&self, filter: &DeadFilter) -> Result<u64, IdemError> {
        let ids = self.dead_ids(filter).await?;
        Ok(self.discard_jobs(ids).await?.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::WorkerConfig;

    const HOUR: Duration = Duration::from_secs(3600);

    fn refused(jobs: usize) -> RetryRefused {
        RetryRefused {
            jobs: (1..=jobs as i64).map(|id| (id, 50 * HOUR)).collect(),
            effect_keys: 72 * HOUR,
            horizon: WorkerConfig::default().horizon(),
        }
    }

    #[test]
    fn a_refusal_names_the_jobs_the_numbers_and_the_way_out() {
        let r = refused(2);
        let text = r.to_string();
        for part in [
            "refusing to retry 2 job(s)",
            "job 1 first ran 2d 2h ago, job 2 first ran 2d 2h ago",
            "retry horizon 1d 1h 28m 30s plus the 1h margin",
            "effect-key retention 3d",
            "first attempt started at most 1d 21h 31m 30s ago",
            "Nothing was retried",
            "--force",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
    }

    #[test]
    fn a_long_refusal_counts_the_jobs_it_does_not_name() {
        let text = refused(12).to_string();
        assert!(text.contains("job 10 first ran"), "{text}");
        assert!(!text.contains("job 11 "), "{text}");
        assert!(text.contains("and 2 more"), "{text}");
    }

    #[test]
    fn a_retention_shorter_than_the_horizon_allows_no_retry() {
        let r = RetryRefused {
            effect_keys: 20 * HOUR,
            ..refused(1)
        };
        assert_eq!(r.allowance(), None);
        assert!(r.to_string().contains("no job that has run can be"), "{r}");
    }
}
