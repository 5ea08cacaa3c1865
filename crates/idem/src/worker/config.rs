//! A worker's settings: [`WorkerConfig`], its named defaults, and `validate`, the one
//! check a configuration passes before a worker runs with it.
//!
//! What must stay true: `Worker::new` validates, so every running worker's config has
//! passed `validate`, and its error names the bad value and what is allowed; every
//! default is a named constant here.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::{Horizon, HorizonParams, human, retry_horizon};
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
/// Connections of a worker's own duties, beside its running jobs: two completion flushes
/// in flight (the transactions that count batch children), the rescuer, the purger, the
/// maintenance elector, the listener (which holds its connection) and the announcer of
/// enqueues. On PostgreSQL claims, the heartbeat and the first statement of each flush
/// use pools of their own.
pub const WORKER_CONNECTIONS: u32 = 7;
/// The setting that sizes the PostgreSQL pool, as the pool check names it to a library
/// user ([`WorkerConfig::check_connections`]); a program that sizes the pool from its own
/// settings names those instead (`Idem::with_pool_setting`).
pub const POOL_SETTING: &str = "PgOptions::max_connections (Idem::connect_with)";

/// Highest concurrency accepted per queue.
pub const MAX_CONCURRENCY: usize = 10_000;
/// Default cap on the delay a handler chooses with `JobError::retry_after`: 1 h; a longer
/// one is clamped to it (with a warning, and noted in the attempt's error).
///
/// Why 1 h, and [`DEFAULT_MAX_SNOOZE`] 1 h and [`DEFAULT_MAX_SNOOZES`] 10: every delay a
/// job can take counts in its retry horizon, which the default 3-day retention of effect
/// and enqueue keys must cover with the 1 h margin. With every default the horizon is
/// 1d 1h 28m 30s: the failed attempts' delays 15 h (the default ladder's four rungs under
/// 1 h may each become 1 h: 4 h + 1h 6m + 3h 18m + 6h 36m at jitter's maximum), ten
/// snoozes 10h 15m 50s (each 1 h plus an attempt's 1m 35s of job timeout, lease and
/// rescue interval) and eight attempts 12m 40s. With the margin that asks for
/// 1d 2h 28m 30s of the 3 days, so a job's keys outlive its worst case by almost two
/// days, and an operator can still retry a dead job without force until its first
/// attempt is 1d 21h 31m 30s old. A handler that needs to wait days should enqueue a
/// new job with `run_at` instead: an enqueue key's window runs from the job's `run_at`.
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);
/// Default cap on one snooze (`JobError::snooze`): 1 h; a longer one is clamped to it.
/// See [`DEFAULT_MAX_RETRY_AFTER`] for the horizon these defaults give.
pub const DEFAULT_MAX_SNOOZE: Duration = Duration::from_secs(3600);
/// Default number of snoozes a job may take: 10. A snooze beyond them counts as a failed
/// attempt along the ladder, so a job that always snoozes still ends in `dead`. See
/// [`DEFAULT_MAX_RETRY_AFTER`] for the horizon these defaults give.
pub const DEFAULT_MAX_SNOOZES: i32 = 10;

/// Settings of a worker; `validate` names any bad value.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerConfig {
    /// Name recorded as `lease_owner`; `None` = host, pid and a random 64-bit instance id.
    /// Processes given one name stay apart where it matters (fences decide every write,
    /// and each stands for the maintenance leadership under an instance id of its own);
    /// only operators reading `lease_owner` see them as one.
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
    /// The longest delay a handler's `JobError::retry_after` gets: a longer one is
    /// clamped to this. Counts in the retry horizon for every failed attempt.
    pub max_retry_after: Duration,
    /// The longest snooze a handler's `JobError::snooze` gets: a longer one is clamped
    /// to this. Counts in the retry horizon for every snooze.
    pub max_snooze: Duration,
    /// How many snoozes a job may take (counted per job in the store, reset by an
    /// operator retry); a snooze beyond them counts as a failed attempt along the ladder.
    pub max_snoozes: i32,
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
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
            max_snooze: DEFAULT_MAX_SNOOZE,
            max_snoozes: DEFAULT_MAX_SNOOZES,
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
        self.check_handler_delays()?;
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

    /// The bounds on handler-chosen delays: caps above zero, a snooze count of 0 or more.
    fn check_handler_delays(&self) -> Result<(), IdemError> {
        for (name, d, default) in [
            (
                "max_retry_after",
                self.max_retry_after,
                DEFAULT_MAX_RETRY_AFTER,
            ),
            ("max_snooze", self.max_snooze, DEFAULT_MAX_SNOOZE),
        ] {
            if d.is_zero() {
                return bad(format!(
                    "{name} is 0s; it must be above zero (a longer delay a handler asks for \
                     is clamped to it; the default is {})",
                    human(default)
                ));
            }
        }
        if self.max_snoozes < 0 {
            return bad(format!(
                "max_snoozes is {}; it must be 0 or more (0: every snooze counts as a failed \
                 attempt; the default is {DEFAULT_MAX_SNOOZES})",
                self.max_snoozes
            ));
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

    /// Checks this worker against the store's pool of `pool` connections for
    /// transactions (`None`: a store without a pool, SQLite). Refused when the pool cannot
    /// serve the worker's own duties ([`WORKER_CONNECTIONS`]) and one job. Warned (logged)
    /// when it cannot serve every running job at once holding a connection (an effect
    /// transaction each) as well: jobs then wait for connections (claims and the heartbeat,
    /// on pools of their own, do not). The messages name the numbers and the way out: a
    /// larger pool through `setting` (for a library user [`POOL_SETTING`]), at the value
    /// `setting_for` gives for the connections wanted ([`idem_store::Store::connections_for`]),
    /// or less concurrency.
    pub fn check_connections(
        &self,
        pool: Option<u32>,
        setting_for: impl Fn(u32) -> u32,
        setting: &str,
    ) -> Result<(), IdemError> {
        let Some(pool) = pool else { return Ok(()) };
        let jobs: usize = self.queues.values().sum();
        let jobs = u32::try_from(jobs).unwrap_or(u32::MAX);
        let wanted = jobs.saturating_add(WORKER_CONNECTIONS);
        let raise_to = setting_for(wanted);
        if pool <= WORKER_CONNECTIONS {
            return Err(IdemError::Config(format!(
                "the PostgreSQL pool has {pool} connections for transactions; a worker needs \
                 {WORKER_CONNECTIONS} for its completion flushes, rescuer, purger, elector, \
                 listener and announcer, and at least one for its jobs: raise {setting} to \
                 {raise_to} or more"
            )));
        }
        if pool < wanted {
            tracing::warn!(
                pool,
                wanted,
                "the PostgreSQL pool has {pool} connections for transactions; this worker runs \
                 up to {jobs} jobs at once and needs {WORKER_CONNECTIONS} more for its own \
                 duties: jobs that each open an effect transaction will wait for connections. \
                 Raise {setting} to {raise_to} (the server's max_connections must allow it) or \
                 lower the queues' concurrency"
            );
        }
        Ok(())
    }

    /// The worst-case time from a job's first attempt to its last under this
    /// configuration, every delay a job can take counted (see [`retry_horizon`]).
    pub fn horizon(&self) -> Horizon {
        let ladders = std::iter::once(&self.ladder)
            .chain(self.queue_ladders.values())
            .chain(self.kind_ladders.values());
        retry_horizon(ladders, &self.horizon_params())
    }

    /// What [`horizon`](Self::horizon) is computed from.
    pub fn horizon_params(&self) -> HorizonParams {
        HorizonParams {
            max_attempts: self.max_attempts,
            lease: self.lease,
            job_timeout: self.job_timeout,
            rescue_interval: self.rescue_interval,
            max_retry_after: self.max_retry_after,
            max_snooze: self.max_snooze,
            max_snoozes: self.max_snoozes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(config: WorkerConfig) -> String {
        config.validate().unwrap_err().to_string()
    }

    #[test]
    fn the_defaults_are_valid() {
        WorkerConfig::default().validate().unwrap();
        let none = WorkerConfig {
            max_snoozes: 0,
            ..WorkerConfig::default()
        };
        none.validate().unwrap();
    }

    #[test]
    fn bad_bounds_on_handler_delays_are_named() {
        let err = refusal(WorkerConfig {
            max_retry_after: Duration::ZERO,
            ..WorkerConfig::default()
        });
        assert!(err.contains("max_retry_after is 0s"), "{err}");
        assert!(err.contains("the default is 1h"), "{err}");
        let err = refusal(WorkerConfig {
            max_snooze: Duration::ZERO,
            ..WorkerConfig::default()
        });
        assert!(err.contains("max_snooze is 0s"), "{err}");
        let err = refusal(WorkerConfig {
            max_snoozes: -1,
            ..WorkerConfig::default()
        });
        assert!(
            err.contains("max_snoozes is -1; it must be 0 or more"),
            "{err}"
        );
    }

    #[test]
    fn the_horizon_follows_the_bounds_on_handler_delays() {
        let base = WorkerConfig::default().horizon();
        let longer = WorkerConfig {
            max_retry_after: Duration::from_secs(2 * 3600),
            max_snoozes: 11,
            ..WorkerConfig::default()
        };
        let h = longer.horizon();
        assert!(h.handler_delays > base.handler_delays);
        assert_eq!(h.snoozes - base.snoozes, base.snoozes / 10);
        assert_eq!(longer.horizon_params().max_snoozes, 11);
    }

    #[test]
    fn the_pool_check_names_the_setting_it_is_given() {
        let one = WorkerConfig::default().only_queue("q", 1);
        let same = |n| n;
        let err = one.check_connections(Some(WORKER_CONNECTIONS), same, POOL_SETTING);
        let err = err.unwrap_err().to_string();
        assert!(
            err.contains("raise PgOptions::max_connections (Idem::connect_with) to 8 or more"),
            "{err}"
        );
        let err = one.check_connections(Some(3), |n| n + 3, "--pool-size");
        let err = err.unwrap_err().to_string();
        assert!(err.contains("raise --pool-size to 11 or more"), "{err}");
        one.check_connections(Some(WORKER_CONNECTIONS + 1), same, "--pool-size")
            .unwrap();
        one.check_connections(None, same, "--pool-size").unwrap();
    }
}
