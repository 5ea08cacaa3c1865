//! Job records and the parameter structs of every job operation.
//!
//! Each operation takes one params struct, so adding a field never changes a signature.
//! Time comes in the params: `now: None` means the database clock (production);
//! `Some(t)` injects time (tests, simulations).

use serde::{Deserialize, Serialize};

use crate::{StoreError, StoreResult, Timestamp};

/// The state of a job. Stored as TEXT with a CHECK constraint on every store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting for its `run_at`.
    Scheduled,
    /// Ready to be claimed.
    Available,
    /// Claimed by a worker under a lease and a fence.
    Running,
    /// Failed an attempt; waits for its `run_at` to be claimed again.
    Retryable,
    /// Finished successfully.
    Completed,
    /// Failed for good: permanent error, ladder exhausted, or an unknown remote outcome.
    Dead,
    /// Cancelled by an operator.
    Cancelled,
}

impl JobState {
    /// Every state, in lifecycle order.
    pub const ALL: [JobState; 7] = [
        JobState::Scheduled,
        JobState::Available,
        JobState::Running,
        JobState::Retryable,
        JobState::Completed,
        JobState::Dead,
        JobState::Cancelled,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Scheduled => "scheduled",
            JobState::Available => "available",
            JobState::Running => "running",
            JobState::Retryable => "retryable",
            JobState::Completed => "completed",
            JobState::Dead => "dead",
            JobState::Cancelled => "cancelled",
        }
    }

    /// Whether the job has reached a final state (completed, dead or cancelled).
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            JobState::Completed | JobState::Dead | JobState::Cancelled
        )
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for JobState {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                StoreError::Invalid(format!(
                    "unknown job state {s:?}; expected one of scheduled, available, running, \
                     retryable, completed, dead, cancelled"
                ))
            })
    }
}

/// One job as stored in `idem_job`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRow {
    /// Store-assigned id.
    pub id: i64,
    /// Handler name.
    pub kind: String,
    /// Queue the job waits in.
    pub queue: String,
    /// Handler arguments.
    pub args: serde_json::Value,
    /// Lower numbers are claimed first.
    pub priority: i16,
    /// Lifecycle state.
    pub state: JobState,
    /// Attempts started so far (incremented by each claim).
    pub attempt: i32,
    /// Attempts allowed before the job is dead.
    pub max_attempts: i32,
    /// Not claimed before this time.
    pub run_at: Timestamp,
    /// Fencing token: incremented on every claim; every write of a claim carries it.
    pub fence: i64,
    /// The worker holding the lease, while running.
    pub lease_owner: Option<String>,
    /// When the current lease expires (database clock), while running.
    pub lease_expires_at: Option<Timestamp>,
    /// The batch the job belongs to, if any.
    pub batch_id: Option<i64>,
    /// When the job was enqueued.
    pub created_at: Timestamp,
    /// When the latest attempt started.
    pub attempted_at: Option<Timestamp>,
    /// When the job reached a final state.
    pub finalized_at: Option<Timestamp>,
    /// The error of the latest failed attempt.
    pub last_error: Option<String>,
    /// Snoozes taken since the job was enqueued or last retried by an operator: the
    /// engine counts a snooze beyond its `max_snoozes` as a failed attempt.
    pub snoozes: i32,
    /// The enqueue key the job was enqueued with, kept for its whole life (its row in
    /// `idem_enqueue_key` may lapse or pass to a later job).
    pub enqueue_key: Option<String>,
    /// The HTTP API principal that enqueued the job; `None` for jobs enqueued through the
    /// library or the CLI. A principal other than an operator sees and acts on its own
    /// jobs only.
    pub principal: Option<String>,
    /// The job whose effect transaction enqueued this one (its chain predecessor).
    pub follows_job: Option<i64>,
    /// The batch whose successor this job is.
    pub follows_batch: Option<i64>,
    /// The producer's trace context (a W3C `traceparent`), when it had one.
    pub trace_parent: Option<String>,
    /// What the job completed with, if its handler set a result.
    pub result: Option<serde_json::Value>,
}

impl JobRow {
    /// The lease token of this job's current claim.
    pub fn lease_token(&self) -> LeaseToken {
        LeaseToken {
            job_id: self.id,
            fence: self.fence,
        }
    }
}

/// A job to insert.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewJob {
    /// Handler name; must be non-empty.
    pub kind: String,
    /// Queue name; must be non-empty.
    pub queue: String,
    /// Handler arguments.
    pub args: serde_json::Value,
    /// Lower numbers are claimed first.
    pub priority: i16,
    /// Earliest start; `None` = now. A time in the future makes the job `scheduled`.
    pub run_at: Option<Timestamp>,
    /// Attempts allowed (≥ 1).
    pub max_attempts: i32,
    /// Producer-supplied key that makes the enqueue idempotent per queue: while the job
    /// holding the same `(queue, enqueue_key)` is inside its window, the insert returns
    /// that job instead, marked deduplicated. A key's window runs from the later of its
    /// creation and its job's `run_at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enqueue_key: Option<String>,
    /// Insert the job already claimed by `worker` (running, attempt 1, fence 1, leased
    /// for `lease_ms` from now): a worker in the producer's process with a free slot
    /// takes the job in the enqueue's own transaction. Only for a job due now
    /// (`run_at: None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<InsertClaim>,
    /// The HTTP API principal enqueuing the job (see [`JobRow::principal`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The batch the job is a child of (set by the batch operations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<i64>,
    /// The job whose effect transaction enqueues this one (see [`JobRow::follows_job`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follows_job: Option<i64>,
    /// The batch whose successor this job is (set by the batch operations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follows_batch: Option<i64>,
    /// The producer's trace context (a W3C `traceparent`), when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<String>,
}

impl NewJob {
    /// A job of `kind` on `queue` due now, priority 0, with nothing else set.
    pub fn new(
        kind: impl Into<String>,
        queue: impl Into<String>,
        args: serde_json::Value,
        max_attempts: i32,
    ) -> NewJob {
        NewJob {
            kind: kind.into(),
            queue: queue.into(),
            args,
            priority: 0,
            run_at: None,
            max_attempts,
            enqueue_key: None,
            claim: None,
            principal: None,
            batch_id: None,
            follows_job: None,
            follows_batch: None,
            trace_parent: None,
        }
    }
}

/// The claim a job is inserted with (see [`NewJob::claim`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InsertClaim {
    /// The claiming worker (`lease_owner`).
    pub worker: String,
    /// Lease length in milliseconds, from the insert's `now`.
    pub lease_ms: i64,
}

impl JobInsert {
    /// The inserted rows, from the jobs given and what the insert statement returned for
    /// each, in the same order: only the columns the database chose are read back, the
    /// rest (args above all) is not decoded again.
    pub fn rows(self, inserted: Vec<Inserted>) -> StoreResult<Vec<JobRow>> {
        if inserted.len() != self.jobs.len() {
            return Err(StoreError::Database(format!(
                "inserted {} jobs for a batch of {}",
                inserted.len(),
                self.jobs.len()
            )));
        }
        let mut inserted = inserted;
        inserted.sort_by_key(|i| i.id);
        Ok(self
            .jobs
            .into_iter()
            .zip(inserted)
            .map(|(j, i)| {
                // A job whose queue is paused was inserted unclaimed.
                let claim = j.claim.filter(|_| i.state == JobState::Running);
                let claimed = claim.map(|c| {
                    let expires = i.created_at + chrono::Duration::milliseconds(c.lease_ms);
                    (c.worker, expires)
                });
                let started = i32::from(claimed.is_some());
                JobRow {
                    id: i.id,
                    kind: j.kind,
                    queue: j.queue,
                    args: j.args,
                    priority: j.priority,
                    state: i.state,
                    attempt: started,
                    max_attempts: j.max_attempts,
                    run_at: i.run_at,
                    fence: i64::from(started),
                    attempted_at: claimed.as_ref().map(|_| i.created_at),
                    lease_expires_at: claimed.as_ref().map(|c| c.1),
                    lease_owner: claimed.map(|c| c.0),
                    batch_id: j.batch_id,
                    created_at: i.created_at,
                    finalized_at: None,
                    last_error: None,
                    snoozes: 0,
                    enqueue_key: j.enqueue_key,
                    principal: j.principal,
                    follows_job: j.follows_job,
                    follows_batch: j.follows_batch,
                    trace_parent: j.trace_parent,
                    result: None,
                }
            })
            .collect())
    }
}

/// What an insert statement returns for each job: the columns the database chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inserted {
    /// The new id (ids follow the batch's order).
    pub id: i64,
    /// `available`, `scheduled`, or `running` for a job inserted claimed.
    pub state: JobState,
    /// The run time (now when none was given).
    pub run_at: Timestamp,
    /// When it was inserted.
    pub created_at: Timestamp,
}

/// Insert jobs in one statement (and, for jobs with an enqueue key, one more that takes
/// the keys).
#[derive(Debug, Clone, Default)]
pub struct JobInsert {
    /// The jobs, in order; the result has the same order.
    pub jobs: Vec<NewJob>,
    /// How long an enqueue key deduplicates, in milliseconds: a key whose window started
    /// (the later of its creation and its job's `run_at`) more than this long before
    /// `now` is free again.
    pub key_window_ms: i64,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

impl JobInsert {
    /// Whether any job carries an enqueue key.
    pub fn has_keys(&self) -> bool {
        self.jobs.iter().any(|j| j.enqueue_key.is_some())
    }
}

/// A job as an enqueue returned it: inserted now, or the earlier job with the same
/// enqueue key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Enqueued {
    /// The job: the new one, or the one that holds the enqueue key.
    pub job: JobRow,
    /// True when the enqueue key was already taken inside the window and nothing new was
    /// inserted.
    pub deduplicated: bool,
}

/// Take enqueue keys for jobs just inserted, in one statement.
#[derive(Debug, Clone, Default)]
pub struct EnqueueKeyTake {
    /// `(queue, key, job_id)` of each new job with a key; no `(queue, key)` twice.
    pub keys: Vec<(String, String, i64)>,
    /// A key whose window started (the later of its creation and its job's `run_at`) more
    /// than this many milliseconds before `now` is free again.
    pub window_ms: i64,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// Claim up to `limit` jobs of one queue in one statement.
#[derive(Debug, Clone)]
pub struct JobClaim {
    /// The queue to claim from.
    pub queue: String,
    /// At most this many jobs.
    pub limit: u32,
    /// Lease length in milliseconds, from `now`.
    pub lease_ms: i64,
    /// Name of the claiming worker (recorded as `lease_owner`).
    pub worker: String,
    /// Only jobs of these kinds (the kinds the worker has handlers for); `None` = any
    /// kind. A job of a kind no claim asks for waits, and spends no attempt.
    pub kinds: Option<Vec<String>>,
    /// Only jobs enqueued by this principal; `None` = any job.
    pub principal: Option<String>,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// The identity of one claim: a job and the fence it was claimed under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaseToken {
    /// The job.
    pub job_id: i64,
    /// The fence of the claim.
    pub fence: i64,
}

/// Extend many leases in one statement.
#[derive(Debug, Clone)]
pub struct JobHeartbeat {
    /// The claims to extend. Those no longer current are absent from the result.
    pub leases: Vec<LeaseToken>,
    /// New lease length in milliseconds, from `now`.
    pub lease_ms: i64,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// A lease that a heartbeat extended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRenewal {
    /// The job.
    pub job_id: i64,
    /// The fence (unchanged).
    pub fence: i64,
    /// The new expiry.
    pub lease_expires_at: Timestamp,
}

/// Check a claim is current and lock the job's row for the rest of the transaction.
#[derive(Debug, Clone, Copy)]
pub struct JobLock {
    /// The claim.
    pub lease: LeaseToken,
    /// How long the transaction may sit idle between statements before the server ends
    /// its session (PostgreSQL's `idle_in_transaction_session_timeout`, for this
    /// transaction only), in milliseconds; `None` leaves the session's setting. A worker
    /// passes its lease: a holder stalled that long (a paused process) has lost its claim
    /// anyway, and ending its session releases the job's row for the rescuer.
    pub idle_timeout_ms: Option<i64>,
}

impl JobLock {
    /// The lock of `lease`'s claim, with no idle timeout of its own.
    pub fn of(lease: LeaseToken) -> JobLock {
        JobLock {
            lease,
            idle_timeout_ms: None,
        }
    }
}

/// Complete a running job under its current fence.
#[derive(Debug, Clone)]
pub struct JobComplete {
    /// The claim.
    pub lease: LeaseToken,
    /// What the job completed with (kept as its `result`).
    pub result: Option<serde_json::Value>,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// Complete many running jobs, each under its own current fence, in one statement.
#[derive(Debug, Clone, Default)]
pub struct JobCompleteMany {
    /// The claims. Those no longer current are absent from the result.
    pub leases: Vec<LeaseToken>,
    /// The results of those jobs that completed with one, by job id.
    pub results: Vec<(i64, serde_json::Value)>,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

impl JobCompleteMany {
    /// The same completion for the leases not in `done` (those a first statement did not
    /// complete), with their results.
    pub fn without(&self, done: &[i64]) -> JobCompleteMany {
        let done: std::collections::HashSet<i64> = done.iter().copied().collect();
        JobCompleteMany {
            leases: self
                .leases
                .iter()
                .filter(|l| !done.contains(&l.job_id))
                .copied()
                .collect(),
            results: self
                .results
                .iter()
                .filter(|(id, _)| !done.contains(id))
                .cloned()
                .collect(),
            now: self.now,
        }
    }
}

/// A job a completion statement completed: its id and its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completed {
    /// The job.
    pub job_id: i64,
    /// Its batch, if it is a child of one.
    pub batch_id: Option<i64>,
}

/// How [`crate::StoreTx::job_fail_awaiting`] left a job that stopped to await an intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Awaited {
    /// The failure did not make the job dead: nothing awaits.
    NotDead,
    /// Dead, awaiting the intent, whose outcome is still unknown or manual.
    Waits,
    /// The intent was settled meanwhile: the job was put back to run.
    PutBack,
    /// The intent is gone (purged once settled): the job stays dead for an operator,
    /// since running it again would begin the call afresh.
    Gone,
}

/// Record a failed attempt under the current fence.
#[derive(Debug, Clone)]
pub struct JobFail {
    /// The claim.
    pub lease: LeaseToken,
    /// What went wrong, kept in the attempt history and (except for a snooze, which is
    /// not an error) as `last_error`.
    pub error: String,
    /// `Some(ms)`: the job becomes `retryable` and runs again `ms` after `now`.
    /// `None`: the job becomes `dead`.
    pub retry_in_ms: Option<i64>,
    /// Run again after `retry_in_ms` without spending an attempt (the claim's attempt is
    /// given back) and count the snooze (`snoozes` + 1); recorded as `snoozed`. Never
    /// makes the job dead: the engine decides when a snooze is one too many and fails the
    /// attempt instead.
    pub snooze: bool,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// How a rescue's `last_error` begins (both stores' `job/rescue.sql`): a claim leaves
/// `last_error` as it is, so a job claimed after a rescue still shows it.
pub const RESCUE_ERROR_PREFIX: &str = "lease expired: ";

/// Move running jobs whose lease expired back to `retryable` (or `dead` when no attempts
/// are left).
#[derive(Debug, Clone)]
pub struct JobRescue {
    /// At most this many jobs per call.
    pub limit: u32,
    /// Delay before a rescued job may be claimed again, in milliseconds. With 0 (what
    /// workers use) a rescued job keeps its `run_at`, its place in claim order: it runs
    /// before jobs enqueued after it.
    pub retry_in_ms: i64,
    /// A cap on attempts over each job's own `max_attempts` (the rescuing worker's), so a
    /// job enqueued with more attempts than the workers allow is dead at the cap.
    pub max_attempts: Option<i32>,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// Cancel an unfinished job.
#[derive(Debug, Clone, Copy)]
pub struct JobCancel {
    /// The job.
    pub job_id: i64,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// List jobs, newest id first, with optional filters and keyset pagination.
#[derive(Debug, Clone, Default)]
pub struct JobList {
    /// Only this state.
    pub state: Option<JobState>,
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only jobs enqueued by this principal.
    pub principal: Option<String>,
    /// Only ids below this one (the last id of the previous page).
    pub before_id: Option<i64>,
    /// At most this many rows.
    pub limit: u32,
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// The job completed.
    Completed,
    /// The attempt failed and the job will run again.
    Retryable,
    /// The attempt failed and the job is dead.
    Dead,
    /// The worker's lease expired before it finished; the rescuer recorded the attempt.
    LeaseExpired,
    /// An operator cancelled the job while this attempt ran.
    Cancelled,
    /// The handler asked to run later without spending an attempt.
    Snoozed,
}

impl AttemptOutcome {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Completed => "completed",
            AttemptOutcome::Retryable => "retryable",
            AttemptOutcome::Dead => "dead",
            AttemptOutcome::LeaseExpired => "lease_expired",
            AttemptOutcome::Cancelled => "cancelled",
            AttemptOutcome::Snoozed => "snoozed",
        }
    }
}

impl AttemptOutcome {
    /// The outcome of a failed attempt, from the job's state after the failure was
    /// recorded: `dead` if the job is dead, `snoozed` for a snooze, else `retryable`.
    pub fn of_failure(job: &JobRow, snooze: bool) -> AttemptOutcome {
        if snooze {
            AttemptOutcome::Snoozed
        } else if job.state == JobState::Dead {
            AttemptOutcome::Dead
        } else {
            AttemptOutcome::Retryable
        }
    }
}

impl std::str::FromStr for AttemptOutcome {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use AttemptOutcome::*;
        [Completed, Retryable, Dead, LeaseExpired, Cancelled, Snoozed]
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| StoreError::Database(format!("unknown attempt outcome {s:?}")))
    }
}

/// One finished attempt, as kept in `idem_job_attempt`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRow {
    /// The job.
    pub job_id: i64,
    /// Attempt number (1-based).
    pub attempt: i32,
    /// The fence the attempt ran under.
    pub fence: i64,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The error, for failed attempts.
    pub error: Option<String>,
    /// When the attempt started.
    pub started_at: Option<Timestamp>,
    /// When the attempt was recorded as finished.
    pub finished_at: Timestamp,
}

/// Jobs of one kind waiting to be claimed in one queue (available, scheduled or
/// retryable): where a kind no running worker has a handler for shows up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueWaiting {
    /// The queue.
    pub queue: String,
    /// The kind.
    pub kind: String,
    /// How many jobs wait.
    pub count: i64,
    /// The earliest `run_at` among them: how long the oldest has been due, when past.
    pub oldest_run_at: Timestamp,
}

/// Jobs of one queue that reached `completed` or `dead` in a time range: the
/// dashboard's throughput and latency (summed, so ranges add up).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueFinished {
    /// The queue.
    pub queue: String,
    /// Jobs completed in the range.
    pub completed: i64,
    /// Jobs dead in the range.
    pub dead: i64,
    /// Of those, the jobs whose last attempt has a start time (the sums below count them).
    pub timed: i64,
    /// Their summed run time (`finalized_at - attempted_at`), in milliseconds.
    pub run_ms: i64,
    /// Their summed wait from due to started (`attempted_at - run_at`, 0 when started
    /// before due), in milliseconds.
    pub wait_ms: i64,
}

/// Parameters of [`crate::Store::queue_finished`]: jobs finalized at or after `since`
/// and before `until`. Reads the range of the `finalized_at` index only, so its cost
/// follows the jobs finished in the range, not the size of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueFinishedList {
    /// The range's start (included).
    pub since: Timestamp,
    /// The range's end (excluded).
    pub until: Timestamp,
}

/// Jobs of one queue in one state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueCount {
    /// The queue.
    pub queue: String,
    /// The state.
    pub state: JobState,
    /// How many jobs.
    pub count: i64,
}
