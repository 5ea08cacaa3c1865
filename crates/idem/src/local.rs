//! Local dispatch: a worker in the producer's own process, idle with a free slot, takes a
//! job due now in the enqueue's own transaction.
//!
//! The job is inserted already claimed (running, attempt 1, fence 1, leased to the
//! worker), so the claim is exactly as durable and as fenced as one made by a claim
//! statement, and one commit and one round trip fewer stand between the enqueue and the
//! handler. A queue's slots are offered only while its claim loop's last claim found the
//! queue empty, so a job never overtakes a backlog the worker knows of; a slot is
//! reserved before the insert (the worker counts it as running, so a shutdown waits for
//! it) and given back if the insert fails or the job was deduplicated. Jobs enqueued in a
//! caller's transaction (`enqueue_tx`) are not dispatched: they must not start before the
//! caller commits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use idem_store::{Enqueued, InsertClaim, JobState, NewJob};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::worker::Shared;

/// The queues of this process's running workers, as slots local enqueues may take.
#[derive(Default)]
pub(crate) struct LocalQueues {
    queues: Mutex<Vec<Weak<QueueSlots>>>,
}

/// One worker's slots for one queue.
pub(crate) struct QueueSlots {
    pub(crate) queue: String,
    /// The worker's slots of this queue; a claimed or dispatched job holds one.
    pub(crate) slots: Arc<Semaphore>,
    /// The claim loop's last claim found the queue empty.
    pub(crate) idle: AtomicBool,
    shared: Weak<Shared>,
}

impl QueueSlots {
    pub(crate) fn new(queue: String, concurrency: usize, shared: &Arc<Shared>) -> Arc<Self> {
        Arc::new(QueueSlots {
            queue,
            slots: Arc::new(Semaphore::new(concurrency)),
            idle: AtomicBool::new(false),
            shared: Arc::downgrade(shared),
        })
    }
}

/// A slot taken for a job about to be inserted claimed. Dropped unused, it gives the
/// slot back.
pub(crate) struct Reservation {
    shared: Arc<Shared>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.permit.take().is_some() {
            self.shared.job_ended();
        }
    }
}

impl LocalQueues {
    /// Offers `slots` to local enqueues until the worker stops.
    pub(crate) fn register(&self, slots: &Arc<QueueSlots>) {
        let mut queues = self.queues.lock().expect("local queues lock poisoned");
        queues.retain(|q| q.strong_count() > 0);
        queues.push(Arc::downgrade(slots));
    }

    /// Takes a slot for each job that an idle local worker of its queue can run now and
    /// marks the job to be inserted claimed by that worker; `None` for the others.
    pub(crate) fn reserve(&self, jobs: &mut [NewJob]) -> Vec<Option<Reservation>> {
        let queues: Vec<Arc<QueueSlots>> = {
            let queues = self.queues.lock().expect("local queues lock poisoned");
            queues.iter().filter_map(Weak::upgrade).collect()
        };
        jobs.iter_mut()
            .map(|job| {
                if queues.is_empty() || job.run_at.is_some() || job.claim.is_some() {
                    return None;
                }
                let reservation = queues.iter().find_map(|q| take(q, job))?;
                job.claim = Some(InsertClaim {
                    worker: reservation.shared.name().to_owned(),
                    lease_ms: reservation.shared.lease_ms(),
                });
                Some(reservation)
            })
            .collect()
    }

    /// Starts each inserted job that was reserved and came back claimed; returns, per
    /// job, whether it started (the others wait for a claim).
    pub(crate) fn start(&self, rows: &[Enqueued], reserved: Vec<Option<Reservation>>) -> Vec<bool> {
        rows.iter()
            .zip(reserved)
            .map(|(row, reservation)| match reservation {
                Some(r) if !row.deduplicated && row.job.state == JobState::Running => {
                    r.start(row.job.clone());
                    true
                }
                _ => false,
            })
            .collect()
    }
}

impl Reservation {
    /// Runs `job`, inserted claimed, in the reserved slot.
    fn start(mut self, job: idem_store::JobRow) {
        let permit = self
            .permit
            .take()
            .expect("an unused reservation holds its slot");
        self.shared.clone().start_dispatched(job, permit);
    }
}

/// A free slot of `q` for `job`, if `q` is its queue, idle, accepting and knows the kind.
fn take(q: &Arc<QueueSlots>, job: &NewJob) -> Option<Reservation> {
    if q.queue != job.queue || !q.idle.load(Ordering::Acquire) {
        return None;
    }
    let shared = q.shared.upgrade()?;
    if !shared.accepts(&job.kind) {
        return None;
    }
    let permit = q.slots.clone().try_acquire_owned().ok()?;
    shared.job_started();
    Some(Reservation {
        shared,
        permit: Some(permit),
    })
}
