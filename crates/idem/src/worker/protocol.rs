//! The worker protocol for workers outside this process (the HTTP API's `/v1/claims`
//! and `/v1/jobs/{id}/heartbeat|complete|fail`): claims, heartbeats, completions and
//! failures under the rules a worker here follows.
//!
//! What must stay true: every write carries the claim's fence and a stale one is
//! `LeaseLost` with nothing changed (the store decides); a lease is never longer than
//! the configured lease the retry horizon counts; a failure walks the same ladder, with
//! the same clamps, as a handler's error here (`delay.rs`).

use idem_store::{JobClaim, JobComplete, JobHeartbeat, JobRow, LeaseToken, StoreError, Timestamp};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::pipeline::record_failure;
use super::{WorkerConfig, maintenance_tasks};
use crate::Idem;
use crate::client::millis;
use crate::error::{IdemError, JobError};
use crate::telemetry::metrics::{self, Outcome};

/// The most jobs one claim may take.
pub const MAX_CLAIM: u32 = 100;

/// The shortest lease a claim or heartbeat may ask for, in milliseconds.
pub const MIN_LEASE_MS: i64 = 1_000;

/// Claims and final writes for workers in other processes; see the module docs.
#[derive(Clone)]
pub struct WorkerProtocol {
    idem: Idem,
    config: WorkerConfig,
}

/// A claim by a worker elsewhere.
#[derive(Debug, Clone)]
pub struct ProtocolClaim {
    /// The queue.
    pub queue: String,
    /// The kinds the worker can run (at least one).
    pub kinds: Vec<String>,
    /// At most this many jobs (1–[`MAX_CLAIM`]).
    pub limit: u32,
    /// The lease, in milliseconds (`None` = the configured lease).
    pub lease_ms: Option<i64>,
    /// The worker's name (recorded as each job's `lease_owner`).
    pub worker: String,
    /// Only jobs of this principal; `None` = any job.
    pub principal: Option<String>,
}

impl WorkerProtocol {
    /// The protocol under `config` (its lease, ladders and bounds), refused like
    /// [`Idem::worker`] when the configuration is invalid or its retry horizon outlives
    /// the client's retention.
    pub fn new(idem: Idem, config: WorkerConfig) -> Result<WorkerProtocol, IdemError> {
        config.validate()?;
        idem.retention().check_covers(&config.horizon())?;
        Ok(WorkerProtocol { idem, config })
    }

    /// Starts the rescuer (and the purger, unless the configuration turns it off) for the
    /// jobs of workers elsewhere, when no worker in this process runs them: a worker that
    /// died holding a claim has its job rescued once the lease ends. They run until the
    /// returned sender is sent `true` or dropped; await the handles to let them finish.
    pub fn start_maintenance(&self, owner: &str) -> (watch::Sender<bool>, Vec<JoinHandle<()>>) {
        let (stop, stopped) = watch::channel(false);
        let tasks = maintenance_tasks(&self.idem, &self.config, owner, stopped, |_| {});
        (stop, tasks)
    }

    /// The configuration it follows.
    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// The lease to grant for `asked` milliseconds: the configured lease when none is
    /// asked; refused outside [`MIN_LEASE_MS`] ..= the configured lease.
    pub fn lease_ms(&self, asked: Option<i64>) -> Result<i64, IdemError> {
        let max = millis(self.config.lease);
        match asked {
            None => Ok(max),
            Some(ms) if (MIN_LEASE_MS..=max).contains(&ms) => Ok(ms),
            Some(ms) => Err(IdemError::InvalidJob(format!(
                "lease_ms {ms} is outside {MIN_LEASE_MS}..={max}; the longest lease is the \
                 server's configured lease, which its retry horizon counts (heartbeat to \
                 hold a job longer)"
            ))),
        }
    }

    /// Claims up to `claim.limit` jobs of the given kinds, each with a new fence.
    pub async fn claim(&self, claim: ProtocolClaim) -> Result<Vec<JobRow>, IdemError> {
        if !(1..=MAX_CLAIM).contains(&claim.limit) {
            return Err(IdemError::InvalidJob(format!(
                "limit {} is outside 1..={MAX_CLAIM}",
                claim.limit
            )));
        }
        if claim.kinds.is_empty() || claim.kinds.iter().any(|k| k.is_empty()) {
            return Err(IdemError::InvalidJob(
                "kinds must name at least one job kind the worker can run, none empty".into(),
            ));
        }
        if claim.queue.is_empty() || claim.worker.is_empty() {
            return Err(IdemError::InvalidJob(
                "queue and worker must not be empty".into(),
            ));
        }
        let lease_ms = self.lease_ms(claim.lease_ms)?;
        let queue = claim.queue.clone();
        let rows = self
            .idem
            .store
            .job_claim(JobClaim {
                queue: claim.queue,
                limit: claim.limit,
                lease_ms,
                worker: claim.worker,
                kinds: Some(claim.kinds),
                principal: claim.principal,
                now: self.idem.clock.now(),
            })
            .await?;
        metrics::claimed(&queue, rows.len());
        rows.iter().for_each(metrics::started);
        Ok(rows)
    }

    /// Extends one claim's lease; `LeaseLost` when the claim is not current.
    pub async fn heartbeat(
        &self,
        lease: LeaseToken,
        lease_ms: Option<i64>,
    ) -> Result<Timestamp, IdemError> {
        let lease_ms = self.lease_ms(lease_ms)?;
        let renewed = self
            .idem
            .store
            .job_heartbeat(JobHeartbeat {
                leases: vec![lease],
                lease_ms,
                now: self.idem.clock.now(),
            })
            .await?;
        renewed
            .into_iter()
            .find(|r| r.job_id == lease.job_id && r.fence == lease.fence)
            .map(|r| r.lease_expires_at)
            .ok_or_else(|| StoreError::lease_lost(lease).into())
    }

    /// Completes the job under its claim, keeping `result` (checked as a handler's
    /// would be); `LeaseLost` when the claim is not current. A child of a batch moves its
    /// batch's counts, and the last one enqueues the batch's successor.
    pub async fn complete(
        &self,
        lease: LeaseToken,
        result: Option<serde_json::Value>,
    ) -> Result<JobRow, IdemError> {
        if let Some(r) = &result {
            crate::context::check_result(r)?;
        }
        let done = self
            .idem
            .store
            .job_complete(JobComplete {
                lease,
                result,
                now: self.idem.clock.now(),
            })
            .await;
        match &done {
            Ok(row) => metrics::finished(row, Outcome::Completed, None),
            Err(StoreError::LeaseLost { .. }) => self.count_lease_lost(lease.job_id).await,
            Err(_) => {}
        }
        Ok(done?)
    }

    /// Records a failed (or snoozed) attempt of `job`'s current claim (the row as read,
    /// whose fence is the claim's) along the ladder; `LeaseLost` when the claim is not
    /// current. Returns the row as written.
    pub async fn fail(&self, job: &JobRow, error: JobError) -> Result<JobRow, IdemError> {
        match record_failure(&self.idem, &self.config, None, job, error).await {
            Ok((row, finished)) => {
                metrics::finished(&row, finished.outcome(), None);
                Ok(row)
            }
            Err(e) => {
                if matches!(e, StoreError::LeaseLost { .. }) {
                    metrics::finished(job, Outcome::LeaseLost, None);
                }
                Err(e.into())
            }
        }
    }

    /// Counts a completion refused for a stale claim, under the job's queue and kind (read
    /// only on this rare path; a job gone meanwhile is not counted).
    async fn count_lease_lost(&self, job_id: i64) {
        if let Ok(Some(row)) = self.idem.store.job_get(job_id).await {
            metrics::finished(&row, Outcome::LeaseLost, None);
        }
    }
}
