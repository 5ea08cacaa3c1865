//! What a worker did: [`WorkerReport`], and `Stats`, the live counters its tasks add to.
//!
//! What must stay true: each outcome is counted once, by the step that decided it (the
//! claim, the pipeline's finish, the rescue service), and a report is a plain copy of
//! the counters at one moment.

use std::sync::atomic::{AtomicU64, Ordering};

/// What a worker did, counted since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WorkerReport {
    /// Jobs claimed.
    pub claimed: u64,
    /// Jobs completed by this worker.
    pub completed: u64,
    /// Jobs a local enqueue handed this worker in its own transaction (counted in
    /// `claimed` too).
    pub dispatched_locally: u64,
    /// Failed attempts that will run again.
    pub retried: u64,
    /// Attempts that snoozed (run later without spending an attempt).
    pub snoozed: u64,
    /// Jobs this worker moved to `dead`.
    pub dead: u64,
    /// Writes refused because the claim was stale (lease lost): the fence at work.
    pub lease_lost: u64,
    /// Attempts whose handler panicked.
    pub panicked: u64,
    /// Attempts stopped by the job timeout.
    pub timed_out: u64,
    /// Expired leases this worker's rescuer moved back.
    pub rescued: u64,
}

/// The live counters behind a [`WorkerReport`].
#[derive(Default)]
pub(super) struct Stats {
    pub(super) claimed: AtomicU64,
    pub(super) dispatched_locally: AtomicU64,
    pub(super) completed: AtomicU64,
    pub(super) retried: AtomicU64,
    pub(super) snoozed: AtomicU64,
    pub(super) dead: AtomicU64,
    pub(super) lease_lost: AtomicU64,
    pub(super) panicked: AtomicU64,
    pub(super) timed_out: AtomicU64,
    pub(super) rescued: AtomicU64,
}

impl Stats {
    pub(super) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(super) fn report(&self) -> WorkerReport {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WorkerReport {
            claimed: get(&self.claimed),
            dispatched_locally: get(&self.dispatched_locally),
            completed: get(&self.completed),
            retried: get(&self.retried),
            snoozed: get(&self.snoozed),
            dead: get(&self.dead),
            lease_lost: get(&self.lease_lost),
            panicked: get(&self.panicked),
            timed_out: get(&self.timed_out),
            rescued: get(&self.rescued),
        }
    }
}
