//! The metrics idem records, by name (all with the `idem_` prefix), and the one function
//! that records each. Labels: `queue` and `kind` where a job is known, `state` on the
//! cached gauges, `outcome` on the run-time histogram and reconciliation, `target` on
//! purges (the table purged).
//!
//! They go to whatever recorder the process installed through the `metrics` facade
//! (`idem serve` and `idem worker --metrics-listen` install a Prometheus one; see
//! `idem_http::metrics`); with none installed they cost a check and are dropped.

use std::time::Duration;

use ::metrics::{Unit, counter, describe_counter, describe_gauge, describe_histogram, histogram};
use idem_store::{JobRow, JobState, PurgeTarget};

use crate::intent::ReconcileReport;

/// Gauge: jobs per `queue` and `state`, as of the last refresh (`refresh.rs`).
pub const JOBS: &str = "idem_jobs";
/// Gauge: intents per `state`, as of the last refresh.
pub const INTENTS: &str = "idem_intents";
/// Counter: jobs claimed, per `queue` (by a claim, a local dispatch or the worker protocol).
pub const CLAIMED: &str = "idem_jobs_claimed_total";
/// Counter: jobs completed, per `queue` and `kind`.
pub const COMPLETED: &str = "idem_jobs_completed_total";
/// Counter: failed attempts whose job will run again, per `queue` and `kind`.
pub const FAILED: &str = "idem_jobs_failed_total";
/// Counter: attempts that snoozed, per `queue` and `kind`.
pub const SNOOZED: &str = "idem_jobs_snoozed_total";
/// Counter: jobs moved to `dead` (a failed attempt or a rescue), per `queue` and `kind`.
pub const DEAD: &str = "idem_jobs_dead_total";
/// Counter: expired leases the rescuer moved back (or to `dead`), per `queue` and `kind`.
pub const RESCUED: &str = "idem_jobs_rescued_total";
/// Counter: final writes the store refused because the claim was stale, per `queue` and
/// `kind`.
pub const LEASE_LOST: &str = "idem_lease_lost_total";
/// Counter: effect keys (and ledger entries) found already claimed, per effect `kind`.
pub const EFFECT_KEY_HITS: &str = "idem_effect_key_hits_total";
/// Counter: retries that built a different effect or intent key than an earlier attempt,
/// per effect `kind`.
pub const UNSTABLE_EFFECT_KEYS: &str = "idem_unstable_effect_keys_total";
/// Counter: intents reconciliation or the audit marked `duplicate`.
pub const DUPLICATE_INTENTS: &str = "idem_duplicate_intents_total";
/// Counter: reconciliation's decisions, per `outcome` (applied, absent, duplicate, manual,
/// raced, audit_duplicate, jobs_retried).
pub const RECONCILED: &str = "idem_reconciliations_total";
/// Histogram: seconds from when a job could start (the later of `run_at` and
/// `created_at`) to its claim, per `queue` and `kind`; a claim after a rescue is not
/// counted (the rescued job keeps its `run_at`, its place in claim order).
pub const QUEUE_WAIT: &str = "idem_job_queue_wait_seconds";
/// Histogram: seconds an attempt ran, handler and final write, per `queue`, `kind` and
/// `outcome`.
pub const RUN_TIME: &str = "idem_job_run_seconds";
/// Counter: records purged past their retention, per `target` (the table).
pub const PURGED: &str = "idem_purged_total";

/// Describes every metric to the installed recorder (units and help text); call once,
/// after installing it.
pub fn describe() {
    describe_gauge!(JOBS, "jobs per queue and state, refreshed on an interval");
    describe_gauge!(INTENTS, "intents per state, refreshed on an interval");
    describe_counter!(CLAIMED, "jobs claimed");
    describe_counter!(COMPLETED, "jobs completed");
    describe_counter!(FAILED, "failed attempts whose job will run again");
    describe_counter!(SNOOZED, "attempts that snoozed");
    describe_counter!(DEAD, "jobs moved to dead");
    describe_counter!(RESCUED, "expired leases moved back by the rescuer");
    describe_counter!(LEASE_LOST, "writes refused because the claim was stale");
    describe_counter!(EFFECT_KEY_HITS, "effect keys found already claimed");
    describe_counter!(
        UNSTABLE_EFFECT_KEYS,
        "retries that built another effect key"
    );
    describe_counter!(DUPLICATE_INTENTS, "intents marked duplicate");
    describe_counter!(RECONCILED, "reconciliation decisions");
    describe_histogram!(QUEUE_WAIT, Unit::Seconds, "time from due to claimed");
    describe_histogram!(RUN_TIME, Unit::Seconds, "time an attempt ran");
    describe_counter!(PURGED, "records purged past their retention");
}

fn job_labels(job: &JobRow) -> [(&'static str, String); 2] {
    [("queue", job.queue.clone()), ("kind", job.kind.clone())]
}

/// `n` jobs of `queue` were claimed.
pub(crate) fn claimed(queue: &str, n: usize) {
    counter!(CLAIMED, "queue" => queue.to_owned()).increment(n as u64);
}

/// `job`, just claimed, starts: how long it waited since it could start.
pub(crate) fn started(job: &JobRow) {
    // A rescued job keeps its run_at (its place in claim order) and the row does not say
    // when it was rescued, so its wait is unknown: not counted rather than counted as
    // the lost attempt's length.
    if job.attempt > 1
        && job
            .last_error
            .as_deref()
            .is_some_and(|e| e.starts_with(idem_store::RESCUE_ERROR_PREFIX))
    {
        return;
    }
    let due = job.run_at.max(job.created_at);
    let Some(started) = job.attempted_at else {
        return;
    };
    let waited = (started - due).to_std().unwrap_or_default();
    histogram!(QUEUE_WAIT, &job_labels(job)).record(waited.as_secs_f64());
}

/// How an attempt ended, as recorded by the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Completed,
    Retried,
    Snoozed,
    Dead,
    LeaseLost,
    /// The final write failed; the lease will expire and the rescuer will count it.
    Unrecorded,
}

impl Outcome {
    /// The `outcome` label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Retried => "retried",
            Outcome::Snoozed => "snoozed",
            Outcome::Dead => "dead",
            Outcome::LeaseLost => "lease_lost",
            Outcome::Unrecorded => "unrecorded",
        }
    }
}

/// An attempt of `job` ended with `outcome` after `ran` (when this process timed it).
pub(crate) fn finished(job: &JobRow, outcome: Outcome, ran: Option<Duration>) {
    let name = match outcome {
        Outcome::Completed => COMPLETED,
        Outcome::Retried => FAILED,
        Outcome::Snoozed => SNOOZED,
        Outcome::Dead => DEAD,
        Outcome::LeaseLost => LEASE_LOST,
        Outcome::Unrecorded => "",
    };
    if !name.is_empty() {
        counter!(name, &job_labels(job)).increment(1);
    }
    if let Some(ran) = ran {
        let [queue, kind] = job_labels(job);
        let labels = [queue, kind, ("outcome", outcome.as_str().to_owned())];
        histogram!(RUN_TIME, &labels).record(ran.as_secs_f64());
    }
}

/// The rescuer moved `rows` (as written: `retryable`, or `dead` when out of attempts).
pub(crate) fn rescued(rows: &[JobRow]) {
    for row in rows {
        counter!(RESCUED, &job_labels(row)).increment(1);
        if row.state == JobState::Dead {
            counter!(DEAD, &job_labels(row)).increment(1);
        }
    }
}

/// An effect key (or ledger entry) of `kind` was found already claimed.
pub(crate) fn effect_key_hit(kind: &str) {
    counter!(EFFECT_KEY_HITS, "kind" => kind.to_owned()).increment(1);
}

/// A retry built another key of effect `kind` than an earlier attempt.
pub(crate) fn unstable_effect_key(kind: &str) {
    counter!(UNSTABLE_EFFECT_KEYS, "kind" => kind.to_owned()).increment(1);
}

/// An intent was marked `duplicate`.
pub(crate) fn duplicate_intent() {
    counter!(DUPLICATE_INTENTS).increment(1);
}

/// What one reconciliation pass decided.
pub(crate) fn reconciled(r: &ReconcileReport) {
    let outcomes = [
        ("applied", r.applied),
        ("absent", r.absent),
        ("duplicate", r.duplicates),
        ("manual", r.manual),
        ("raced", r.raced),
        ("audit_duplicate", r.audit_duplicates),
        ("jobs_retried", r.jobs_retried),
    ];
    for (outcome, n) in outcomes.into_iter().filter(|(_, n)| *n > 0) {
        counter!(RECONCILED, "outcome" => outcome).increment(n);
    }
}

/// `n` records of `target` were purged.
pub(crate) fn purged(target: PurgeTarget, n: u64) {
    counter!(PURGED, "target" => target.as_str()).increment(n);
}
