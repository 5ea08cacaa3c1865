//! One claimed job from its handler to its final write, as named steps:
//! `run_job` → `execute` (the handler under the job timeout) → `finish` (complete, or
//! `fail` after the delay `delay.rs` decides).
//!
//! What must stay true: the handler runs inside its job's task, so a panic is caught
//! here and is a failed attempt, not a dead worker; every final write carries the
//! claim's fence, and a refusal is counted as a lost lease, never retried as if the
//! claim were current; the job's slot is given back only after its final write.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use idem_store::{Awaited, JobFail, JobRow, StoreError, StoreResult};
use rand::Rng;
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use super::delay::next_run;
use super::report::Stats;
use super::shared::Held;
use super::{Shared, WorkerConfig};
use crate::Idem;
use crate::context::{JobContext, LeaseSignal};
use crate::error::{JobError, JobErrorKind};
use crate::telemetry::{self, metrics, metrics::Outcome};

/// One claimed job, from its handler to its final write, inside its attempt's span.
pub(super) async fn run_job(shared: Arc<Shared>, job: JobRow, _slot: OwnedSemaphorePermit) {
    let job = Arc::new(job);
    metrics::started(&job);
    let span = telemetry::span::attempt(&job);
    let began = Instant::now();
    let attempt = async {
        let outcome = execute(&shared, &job).await;
        finish(&shared, &job, outcome).await
    };
    let outcome = attempt.instrument(span.clone()).await;
    telemetry::span::ended(&span, outcome);
    metrics::finished(&job, outcome, Some(began.elapsed()));
    // The span closes (and is exported) before the job counts as ended.
    drop(span);
    shared
        .held
        .lock()
        .expect("held lock poisoned")
        .remove(&job.lease_token());
    shared.job_ended();
}

/// How a handler that returned `Ok` left its job.
enum Done {
    /// It completed the job in its effect transaction.
    InTx,
    /// The worker completes it, with the result the handler set.
    Pending(Option<serde_json::Value>),
}

/// Runs the handler in its own task under the job timeout.
async fn execute(shared: &Arc<Shared>, job: &Arc<JobRow>) -> Result<Done, JobError> {
    let lost = Arc::new(LeaseSignal::default());
    let held = Held { lost: lost.clone() };
    shared
        .held
        .lock()
        .expect("held lock poisoned")
        .insert(job.lease_token(), held);
    let Some(handler) = shared.handlers.get(&job.kind).cloned() else {
        return Err(JobError::retry(unknown_kind(shared, &job.kind)));
    };
    let limits = handler.limits();
    if let Some(cap) = limits.max_attempts.filter(|cap| job.attempt > *cap) {
        // Claimed again after its last allowed attempt ended with a lost lease (rescued):
        // it does not run past its kind's limit.
        return Err(JobError::permanent(format!(
            "attempt {} is past the limit of kind {:?} ({cap} attempts); earlier attempts \
             ended without a result (their worker lost the lease)",
            job.attempt, job.kind
        )));
    }
    let lease = shared.config.lease;
    let cx = JobContext::new(job.clone(), shared.idem.clone(), lost, lease);
    // The handler runs in this task: a panic is caught here, and the timeout and a
    // shutdown past its deadline stop it by dropping its future (which rolls back an
    // open effect transaction).
    let run = AssertUnwindSafe(handler.call(cx)).catch_unwind();
    let (timeout, whose) = match limits.timeout {
        Some(t) => (t, "the timeout of its kind"),
        None => (shared.config.job_timeout, "job timeout"),
    };
    let mut abort = shared.abort.subscribe();
    tokio::select! {
        out = tokio::time::timeout(timeout, run) => match out {
            Ok(Ok((mut cx, result))) => result.map(|()| match cx.completed {
                true => Done::InTx,
                false => Done::Pending(cx.result.take()),
            }),
            Ok(Err(panic)) => {
                Stats::add(&shared.stats.panicked, 1);
                let msg = panic_message(panic);
                Err(JobError::retry(format!("handler panicked: {msg}")))
            }
            Err(_) => {
                Stats::add(&shared.stats.timed_out, 1);
                Err(JobError::retry(format!("job timed out after {timeout:?} ({whose})")))
            }
        },
        _ = abort.wait_for(|a| *a) => Err(JobError::retry(
            "worker shut down before the job finished (shutdown timeout reached)",
        )),
    }
}

/// The attempts the job's kind allows, when its handler declared a limit.
fn kind_cap(shared: &Shared, job: &JobRow) -> Option<i32> {
    shared.handlers.get(&job.kind)?.limits().max_attempts
}

/// The error of a job whose kind has no handler here: names the kind and the worker's
/// kinds (the job is retried; a newer deploy may handle it).
fn unknown_kind(shared: &Shared, kind: &str) -> String {
    let mut known: Vec<&str> = shared.handlers.keys().map(String::as_str).collect();
    known.sort_unstable();
    format!(
        "no handler for job kind {kind:?} is registered on worker {}; registered kinds: [{}]",
        shared.name,
        known.join(", ")
    )
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

/// Records the attempt's outcome under the claim's fence; returns it.
async fn finish(shared: &Shared, job: &JobRow, outcome: Result<Done, JobError>) -> Outcome {
    let result = match outcome {
        Ok(Done::InTx) => Ok(Finished::Completed),
        Ok(Done::Pending(result)) => match shared.completer.complete(job, result).await {
            Ok(true) => Ok(Finished::Completed),
            Ok(false) => Ok(Finished::LeaseLost),
            Err(e) => Err(e),
        },
        Err(e) if e.kind == JobErrorKind::LeaseLost => Ok(Finished::LeaseLost),
        Err(e) => record_failure(&shared.idem, &shared.config, kind_cap(shared, job), job, e)
            .await
            .map(|(_, finished)| finished),
    };
    if job.batch_id.is_some() && matches!(result, Ok(Finished::Completed | Finished::Dead)) {
        // The batch's successor may have been enqueued: wake this process's claim loops
        // (other processes find it at their next poll).
        shared.idem.waker.local().notify_waiters();
    }
    count(&shared.stats, job, result)
}

/// Counts `result` in the worker's report (and logs what it must); returns its outcome.
fn count(stats: &Stats, job: &JobRow, result: StoreResult<Finished>) -> Outcome {
    let outcome = match &result {
        Ok(finished) => finished.outcome(),
        Err(StoreError::LeaseLost { .. }) => Outcome::LeaseLost,
        Err(_) => Outcome::Unrecorded,
    };
    match result {
        Ok(Finished::Completed) => Stats::add(&stats.completed, 1),
        Ok(Finished::Retried) => Stats::add(&stats.retried, 1),
        Ok(Finished::Snoozed) => Stats::add(&stats.snoozed, 1),
        Ok(Finished::Dead) => Stats::add(&stats.dead, 1),
        Ok(Finished::LeaseLost) | Err(StoreError::LeaseLost { .. }) => {
            tracing::info!(
                job_id = job.id,
                fence = job.fence,
                "stale claim refused by the store"
            );
            Stats::add(&stats.lease_lost, 1);
        }
        Err(e) => {
            tracing::error!(job_id = job.id, error = %e, "could not record the attempt; the lease will expire and the job will be rescued");
        }
    }
    outcome
}

/// Writes the failure of `job`, which stops to await intent `key`, in one transaction
/// ([`idem_store::StoreTx::job_fail_awaiting`]): dead and awaiting the intent, or put
/// back to run at once when a reconciler or an operator settled the intent meanwhile
/// (ARCHITECTURE.md, "A job awaiting an intent").
async fn fail_awaiting(
    idem: &Idem,
    job: &JobRow,
    params: JobFail,
    key: &str,
) -> StoreResult<(JobRow, Finished)> {
    let snooze = params.snooze;
    let mut tx = idem.store.begin().await?;
    let (row, awaited) = tx.job_fail_awaiting(params, key.to_owned()).await?;
    tx.commit().await?;
    match awaited {
        Awaited::PutBack => tracing::info!(
            job_id = job.id,
            key,
            "the awaited intent was settled meanwhile; the job is put back to run"
        ),
        Awaited::Gone => tracing::warn!(
            job_id = job.id,
            key,
            "the awaited intent is gone; the job stays dead for an operator"
        ),
        Awaited::Waits | Awaited::NotDead => {}
    }
    let finished = match awaited {
        Awaited::PutBack => Finished::Retried,
        _ => Finished::of_failure(&row, snooze),
    };
    Ok((row, finished))
}

/// How an attempt ended, as recorded.
pub(crate) enum Finished {
    Completed,
    Retried,
    Snoozed,
    Dead,
    LeaseLost,
}

impl Finished {
    /// How a failure write (`snooze` or not) ended, from the row it wrote.
    fn of_failure(row: &JobRow, snooze: bool) -> Finished {
        match row.state {
            idem_store::JobState::Dead => Finished::Dead,
            _ if snooze => Finished::Snoozed,
            _ => Finished::Retried,
        }
    }

    /// Its outcome, for metrics and the attempt's span.
    pub(crate) fn outcome(&self) -> Outcome {
        match self {
            Finished::Completed => Outcome::Completed,
            Finished::Retried => Outcome::Retried,
            Finished::Snoozed => Outcome::Snoozed,
            Finished::Dead => Outcome::Dead,
            Finished::LeaseLost => Outcome::LeaseLost,
        }
    }
}

/// Records a failed (or snoozed) attempt of `job`'s claim: retried after the error's delay
/// (clamped) or the ladder's, snoozed, or `dead` when the error is permanent or attempts
/// are used up (see `delay.rs`). A job written dead while it awaits an intent that was
/// settled meanwhile is put back to run in the same transaction. Returns the row as
/// written.
pub(crate) async fn record_failure(
    idem: &Idem,
    config: &WorkerConfig,
    kind_cap: Option<i32>,
    job: &JobRow,
    mut e: JobError,
) -> StoreResult<(JobRow, Finished)> {
    let awaits = e.awaits.take();
    let unit: f64 = rand::rng().random();
    let next = next_run(config, kind_cap, job, e, unit);
    let snooze = next.snooze;
    tracing::debug!(job_id = job.id, attempt = job.attempt, error = %next.message, snooze, "attempt ended without completing");
    let params = JobFail {
        lease: job.lease_token(),
        error: next.message,
        retry_in_ms: next.retry_in.map(crate::client::millis),
        snooze,
        now: idem.clock.now(),
    };
    if let Some(key) = awaits {
        return write_retrying(|| fail_awaiting(idem, job, params.clone(), &key)).await;
    }
    write_retrying(|| async {
        let row = idem.store.job_fail(params.clone()).await?;
        let finished = Finished::of_failure(&row, snooze);
        Ok((row, finished))
    })
    .await
}

/// Retries a final write a few times while the store says retrying can help.
pub(crate) async fn write_retrying<T, F, Fut>(mut op: F) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = StoreResult<T>>,
{
    let mut backoff = Duration::from_millis(50);
    for _ in 0..4 {
        match op().await {
            Err(e) if e.is_retryable() => {
                tracing::warn!(error = %e, "final write failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff *= 3;
            }
            other => return other,
        }
    }
    op().await
}
