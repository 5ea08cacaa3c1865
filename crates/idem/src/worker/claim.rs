//! The claim step: one loop per queue takes free slots and claims up to that many jobs
//! in one round trip, then starts each in its own task.
//!
//! What must stay true: a slot (semaphore permit) is taken before the claim and handed
//! to the job it was claimed for, so a worker never holds more leases than its
//! concurrency; the queue is offered to local enqueues only while the last claim found
//! it empty, so a local job never overtakes a backlog the worker knows of.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use idem_store::JobClaim;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use super::Shared;
use super::pipeline::run_job;
use super::report::Stats;
use crate::local::QueueSlots;

/// Claims jobs of `local`'s queue while slots are free, until `stop` turns true; waits
/// for a wake-up or the poll interval when the queue had fewer jobs than slots.
pub(super) async fn claim_loop(
    shared: Arc<Shared>,
    local: Arc<QueueSlots>,
    concurrency: usize,
    mut stop: watch::Receiver<bool>,
) {
    let (queue, slots) = (&local.queue, &local.slots);
    let batch = shared.config.claim_batch.min(concurrency);
    // After a claim that took all it asked for, the queue probably has more: wait for a
    // quarter of a batch of free slots before claiming again, so that a saturated worker
    // claims in batches rather than one job per completion.
    let refill = (batch / 4).max(1);
    let mut need = 1;
    let mut first = true;
    while !*stop.borrow() {
        let Some(permits) = take_slots(slots, need, batch, &mut stop).await else {
            break;
        };
        let wake = shared.idem.waker.local().notified();
        tokio::pin!(wake);
        wake.as_mut().enable();
        let wanted = permits.len();
        // Until this claim answers, jobs may wait that a local enqueue must not overtake.
        local.idle.store(false, Ordering::Release);
        let got = claim(&shared, queue, permits).await;
        local.idle.store(got < wanted, Ordering::Release);
        if std::mem::take(&mut first) {
            shared.first_claims.send_modify(|n| *n += 1);
        }
        if got == wanted {
            need = refill;
            continue;
        }
        need = 1;
        tokio::select! {
            _ = wake => {},
            _ = tokio::time::sleep(shared.config.poll_interval) => {},
            _ = stop.changed() => {},
        }
    }
}

/// How long a saturated worker waits for a quarter of a batch of free slots before it
/// claims for the slots that are free.
const REFILL_WAIT: std::time::Duration = std::time::Duration::from_millis(5);

/// Waits for at least `need` free slots (for [`REFILL_WAIT`] at most, then for one), then
/// takes as many more as are free, up to `batch`, one permit each. `None` when the worker
/// is stopping.
async fn take_slots(
    slots: &Arc<Semaphore>,
    need: usize,
    batch: usize,
    stop: &mut watch::Receiver<bool>,
) -> Option<Vec<OwnedSemaphorePermit>> {
    // A worker waits for `need` slots for a moment only: the jobs that hold the rest may
    // run long (or wait for one another), and a free slot must not idle beside a backlog.
    let gather = async {
        match tokio::time::timeout(REFILL_WAIT, slots.clone().acquire_many_owned(need as u32)).await
        {
            Ok(p) => p,
            Err(_) => slots.clone().acquire_owned().await,
        }
    };
    let mut first = tokio::select! {
        biased;
        _ = stop.changed() => return None,
        p = gather => p.expect("semaphore never closed"),
    };
    if *stop.borrow() {
        return None;
    }
    let more = slots.available_permits().min(batch - need);
    if more > 0
        && let Ok(extra) = slots.clone().try_acquire_many_owned(more as u32)
    {
        first.merge(extra);
    }
    let mut permits = Vec::with_capacity(first.num_permits());
    while first.num_permits() > 1 {
        permits.extend(first.split(1));
    }
    permits.push(first);
    Some(permits)
}

/// Claims up to `permits.len()` jobs and starts each with one permit; returns how many.
async fn claim(shared: &Arc<Shared>, queue: &str, permits: Vec<OwnedSemaphorePermit>) -> usize {
    let params = JobClaim {
        queue: queue.to_owned(),
        limit: u32::try_from(permits.len()).unwrap_or(u32::MAX),
        lease_ms: shared.lease_ms(),
        worker: shared.name.clone(),
        kinds: Some(shared.kinds.clone()),
        principal: None,
        now: shared.idem.clock.now(),
    };
    let jobs = match shared.idem.store.job_claim(params).await {
        Ok(jobs) => jobs,
        Err(e) => {
            tracing::warn!(worker = %shared.name, queue, error = %e, "claim failed; will retry");
            return 0;
        }
    };
    Stats::add(&shared.stats.claimed, jobs.len() as u64);
    crate::telemetry::metrics::claimed(queue, jobs.len());
    let got = jobs.len();
    for (job, permit) in jobs.into_iter().zip(permits) {
        shared.job_started();
        tokio::spawn(run_job(shared.clone(), job, permit));
    }
    got
}
