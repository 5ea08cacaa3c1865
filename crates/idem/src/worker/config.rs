//! A worker's settings: [`WorkerConfig`], its named defaults, and `validate`, the one
//! check a configuration passes before a worker runs with it.
//!
//! What must stay true: `Worker::new` validates, so every running worker's config has
//! passed `validate`, and its error names the bad value and what is allowed; every
//! default is a named constant here.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::{Horizon, retry_horizon};
use crate::error::IdemError;
use crate::job::{DEFAULT_QUEUE, check_name};
use crate::retry::{DEFAULT_MAX_ATTEMPTS, RetryLadder};

/// Default lease: 30 s.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Default concurrency of the default queue.
pub const DEFAULT_CONCURRENCY: usize = 10;
/// Default time between polls when no wake-up arrives.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(500);
/// Default job timeout.
pub const DEFAULT_JOB_TIMEOUT: Duration = Duration::from_secs(60);
/// Default rescue sweep interval.
pub const DEFAULT_RESCUE_INTERVAL: Duration = Duration::from_secs(5);
/// Default time running jobs get to finish after shutdown starts.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Most jobs one claim statement takes.
pub const DEFAULT_CLAIM_BATCH: usize = 100;
/// Default time between purges.
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(60);
/// Connections of a worker's own duties, beside its running jobs: the heartbeat, two
/// completion flushes in flight, the rescuer, the purger, the listener (which holds its
/// connection) and the announcer of enqueues. Claims use a pool of their own.
pub const WORKER_CONNECTIONS: u32 = 7;

/// Highest concurrency accepted per queue.
pub const MAX_CONCURRENCY: usize = 10_000;

/// Settings of a worker; `validate` names any bad value.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerConfig {
    /// Name recorded as `lease_owner`; `None` = host, pid and a random suffix.
    pub name: Option<String>,
    /// Queue name → how many of its jobs run at once.
    pub queues: BTreeMap<String, usize>,
    /// Lease length; heartbeats extend it.
    pub lease: Duration,
    /// Time between heartbeats; must be shorter than the lease (default lease / 3).
    pub heartbeat_interval: Duration,
    /// Time between claims when no wake-up arrives.
    pub poll_interval: Duration,
    /// A handler running longer is stopped and its attempt fails.
    pub job_timeout: Duration,
    /// Time between rescue sweeps for expired leases.
    pub rescue_interval: Duration,
    /// Time running jobs get to finish after shutdown starts.
    pub shutdown_timeout: Duration,
    /// Most jobs one claim statement takes.
    pub claim_batch: usize,
    /// Delays between attempts, for queues and kinds without a ladder of their own.
    pub ladder: RetryLadder,
    /// Ladders of particular queues (over [`WorkerConfig::ladder`]).
    pub queue_ladders: BTreeMap<String, RetryLadder>,
    /// Ladders of particular job kinds (over a queue's ladder).
    pub kind_ladders: BTreeMap<String, RetryLadder>,
    /// The most attempts any job runs here: a job enqueued with more is dead after this
    /// many. The retry horizon, which the retention windows must cover, is computed with
    /// it.
    pub max_attempts: i32,
    /// Time between purges of records past their retention; `None` = this worker does
    /// not purge (run `idem purge` or another worker's purger).
    pub purge_interval: Option<Duration>,
    /// Let enqueues made through this worker's client in this process hand it jobs due
    /// now while it is idle with a free slot, claimed in the enqueue's own transaction
    /// (one commit fewer between enqueue and handler).
    pub local_dispatch: bool,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            name: None,
            queues: BTreeMap::from([(DEFAULT_QUEUE.to_owned(), DEFAULT_CONCURRENCY)]),
            lease: DEFAULT_LEASE,
            heartbeat_interval: DEFAULT_LEASE / 3,
            poll_interval: DEFAULT_POLL_INTERVAL,
            job_timeout: DEFAULT_JOB_TIMEOUT,
            rescue_interval: DEFAULT_RESCUE_INTERVAL,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            claim_batch: DEFAULT_CLAIM_BATCH,
            ladder: RetryLadder::default(),
            queue_ladders: BTreeMap::new(),
            kind_ladders: BTreeMap::new(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            purge_interval: Some(DEFAULT_PURGE_INTERVAL),
            local_dispatch: true,
        }
    }
}

/// A refusal naming the bad value.
fn bad(message: String) -> Result<(), IdemError> {
    Err(IdemError::Config(message))
}

impl WorkerConfig {
    /// Sets the queues to exactly one, `queue` with `concurrency`.
    pub fn only_queue(mut self, queue: &str, concurrency: usize) -> Self {
        self.queues = BTreeMap::from([(queue.to_owned(), concurrency)]);
        self
    }

    /// Sets the lease and a heartbeat of a third of it.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self.heartbeat_interval = lease / 3;
        self
    }

    /// Checks every value; the error names the bad one and what is allowed.
    pub fn validate(&self) -> Result<(), IdemError> {
        self.check_queues()?;
        self.check_timing()?;
        self.check_limits()?;
        self.check_ladders()
    }

    /// At least one queue; valid names; concurrency 1 to [`MAX_CONCURRENCY`].
    fn check_queues(&self) -> Result<(), IdemError> {
        if self.queues.is_empty() {
            return bad("no queues: give at least one queue with a concurrency ≥ 1".into());
        }
        for (queue, n) in &self.queues {
            check_name("queue", queue).map_err(|e| IdemError::Config(e.to_string()))?;
            if *n == 0 || *n > MAX_CONCURRENCY {
                return bad(format!(
                    "queue {queue:?} has concurrency {n}; use 1 to {MAX_CONCURRENCY}"
                ));
            }
        }
        Ok(())
    }

    /// The lease, a heartbeat shorter than it, and intervals above zero.
    fn check_timing(&self) -> Result<(), IdemError> {
        if self.lease < Duration::from_millis(100) {
            return bad(format!(
                "lease is {:?}; it must be at least 100ms",
                self.lease
            ));
        }
        if self.heartbeat_interval.is_zero() || self.heartbeat_interval >= self.lease {
            return bad(format!(
                "heartbeat interval is {:?} with a lease of {:?}; it must be above zero and \
                 shorter than the lease (lease / 3 is the default)",
                self.heartbeat_interval, self.lease
            ));
        }
        for (name, d) in [
            ("poll interval", self.poll_interval),
            ("job timeout", self.job_timeout),
            ("rescue interval", self.rescue_interval),
        ] {
            if d.is_zero() {
                return bad(format!("{name} is zero; it must be above zero"));
            }
        }
        Ok(())
    }

    /// The claim batch, the attempts cap and the purge interval.
    fn check_limits(&self) -> Result<(), IdemError> {
        if self.claim_batch == 0 {
            return bad("claim batch is 0; it must be at least 1".into());
        }
        if self.max_attempts < 1 {
            return bad(format!(
                "max_attempts is {}; it must be at least 1",
                self.max_attempts
            ));
        }
        if self.purge_interval.is_some_and(|d| d.is_zero()) {
            return bad("purge interval is zero; give a positive interval or none".into());
        }
        Ok(())
    }

    /// Every ladder, the error naming the queue or kind it belongs to.
    fn check_ladders(&self) -> Result<(), IdemError> {
        self.ladder.validate().map_err(IdemError::Config)?;
        for (what, ladders) in [("queue", &self.queue_ladders), ("kind", &self.kind_ladders)] {
            for (name, ladder) in ladders {
                ladder.validate().map_err(|e| {
                    IdemError::Config(format!("the ladder of {what} {name:?}: {e}"))
                })?;
            }
        }
        Ok(())
    }

    /// The ladder a job of `queue` and `kind` retries along: the kind's, else the
    /// queue's, else the default.
    pub fn ladder_for(&self, queue: &str, kind: &str) -> &RetryLadder {
        self.kind_ladders
            .get(kind)
            .or_else(|| self.queue_ladders.get(queue))
            .unwrap_or(&self.ladder)
    }

    /// Checks this worker against the store's pool of `pool` connections (`None`: a
    /// store without a pool, SQLite). Refused when the pool cannot serve the worker's own
    /// duties ([`WORKER_CONNECTIONS`]) and one job. Warned (logged) when it cannot serve
    /// every running job at once holding a connection (an effect transaction each) as
    /// well: jobs then wait for connections, and so may the heartbeat, which can cost
    /// leases when effect transactions are long. The messages name the numbers and the
    /// way out (a larger pool with `Idem::connect_with`, or less concurrency).
    pub fn check_connections(&self, pool: Option<u32>) -> Result<(), IdemError> {
        let Some(pool) = pool else { return Ok(()) };
        let jobs: usize = self.queues.values().sum();
        let jobs = u32::try_from(jobs).unwrap_or(u32::MAX);
        let wanted = jobs.saturating_add(WORKER_CONNECTIONS);
        if pool <= WORKER_CONNECTIONS {
            return Err(IdemError::Config(format!(
                "the PostgreSQL pool has {pool} connections; a worker needs \
                 {WORKER_CONNECTIONS} for its heartbeat, completion flushes, rescuer, purger, \
                 listener and announcer, and at least one for its jobs: raise \
                 PgOptions::max_connections (Idem::connect_with) to {wanted} or more"
            )));
        }
        if pool < wanted {
            tracing::warn!(
                pool,
                wanted,
                "the PostgreSQL pool has {pool} connections; this worker runs up to {jobs} jobs \
                 at once and needs {WORKER_CONNECTIONS} more for its own duties: jobs that each \
                 open an effect transaction will wait for connections, and so may the \
                 heartbeat. Raise PgOptions::max_connections (Idem::connect_with) to {wanted} \
                 or lower the queues' concurrency"
            );
        }
        Ok(())
    }

    /// The worst-case time from a job's first attempt to its last under this
    /// configuration (see [`retry_horizon`]).
    pub fn horizon(&self) -> Horizon {
        let ladders = std::iter::once(&self.ladder)
            .chain(self.queue_ladders.values())
            .chain(self.kind_ladders.values());
        retry_horizon(
            ladders,
            self.max_attempts,
            self.lease,
            self.job_timeout,
            self.rescue_interval,
        )
    }
}
