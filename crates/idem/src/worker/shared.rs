//! `Shared`: the state a running worker's tasks share (claim loops, jobs, heartbeat,
//! listener, the handle), and `Held`, one claim the worker holds.
//!
//! What must stay true: a claim is in `held` from the moment its handler is about to run
//! until its final write, so the heartbeat extends exactly the leases still in use; it is
//! held under its lease (job id and fence), because one worker may hold two claims of the
//! same job at once (the first lost, its handler still running, the job claimed again),
//! and the end of the stale one must not take the live one's lease out of the heartbeat;
//! `running` counts every slot taken (by a claim or a local enqueue's reservation) and
//! is decremented once per slot, so a shutdown that waits for it to reach zero waits
//! for every job.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use idem_store::{JobRow, LeaseToken};
use tokio::sync::{OwnedSemaphorePermit, watch};

use super::listener::Listening;
use super::pipeline::run_job;
use super::report::Stats;
use super::{Worker, WorkerConfig};
use crate::client::Idem;
use crate::completer::Completer;
use crate::context::LeaseSignal;
use crate::handler::ErasedHandler;

/// A claim this worker holds (under its [`LeaseToken`] in [`Shared::held`]).
pub(super) struct Held {
    pub(super) lost: Arc<LeaseSignal>,
}

/// The state a running worker's tasks share.
pub(crate) struct Shared {
    pub(super) idem: Idem,
    /// False once shutdown starts: local enqueues no longer hand jobs to this worker.
    pub(super) accepting: AtomicBool,
    pub(super) completer: Completer,
    /// Turns true when running jobs must stop (shutdown past its deadline).
    pub(super) abort: watch::Sender<bool>,
    /// Whether the worker hears announcements from other processes.
    pub(super) listening: watch::Sender<Listening>,
    /// How many queues' claim loops have had their first claim answered.
    pub(super) first_claims: watch::Sender<usize>,
    pub(super) config: WorkerConfig,
    pub(super) name: String,
    pub(super) handlers: HashMap<String, Arc<dyn ErasedHandler>>,
    /// The kinds of `handlers`, sorted: the only kinds its claims take.
    pub(super) kinds: Vec<String>,
    pub(super) held: Mutex<HashMap<LeaseToken, Held>>,
    pub(super) stats: Stats,
    running: AtomicUsize,
    idle: tokio::sync::Notify,
}

impl Shared {
    /// The state of `worker` about to start, completing through `completer`.
    pub(super) fn new(worker: Worker, completer: Completer) -> Arc<Shared> {
        let mut kinds: Vec<String> = worker.handlers.keys().cloned().collect();
        kinds.sort_unstable();
        Arc::new(Shared {
            kinds,
            completer,
            abort: watch::channel(false).0,
            listening: watch::channel(Listening::Waiting).0,
            first_claims: watch::channel(0).0,
            idem: worker.idem,
            accepting: AtomicBool::new(true),
            config: worker.config,
            name: worker.name,
            handlers: worker.handlers,
            held: Mutex::new(HashMap::new()),
            stats: Stats::default(),
            running: AtomicUsize::new(0),
            idle: tokio::sync::Notify::new(),
        })
    }

    /// Resolves once no job holds a slot.
    pub(super) async fn wait_idle(&self) {
        loop {
            let idle = self.idle.notified();
            if self.running.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }

    /// Stops every running handler; each attempt fails as one to retry.
    pub(super) fn abort_all(&self) {
        self.abort.send_replace(true);
    }

    /// The leases of every claim held now.
    pub(super) fn tokens(&self) -> Vec<LeaseToken> {
        let held = self.held.lock().expect("held lock poisoned");
        held.keys().copied().collect()
    }

    pub(crate) fn lease_ms(&self) -> i64 {
        crate::client::millis(self.config.lease)
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Whether a local enqueue may hand this worker a job of `kind` now.
    pub(crate) fn accepts(&self, kind: &str) -> bool {
        self.config.local_dispatch
            && self.accepting.load(Ordering::Acquire)
            && self.handlers.contains_key(kind)
    }

    /// A job holds a slot from now (claimed, or reserved for a local enqueue).
    pub(crate) fn job_started(&self) {
        self.running.fetch_add(1, Ordering::AcqRel);
    }

    /// A job gave its slot back.
    pub(crate) fn job_ended(&self) {
        self.running.fetch_sub(1, Ordering::AcqRel);
        self.idle.notify_waiters();
    }

    /// Runs a job a local enqueue inserted claimed by this worker, in the slot it
    /// reserved.
    pub(crate) fn start_dispatched(self: Arc<Self>, job: JobRow, permit: OwnedSemaphorePermit) {
        Stats::add(&self.stats.claimed, 1);
        Stats::add(&self.stats.dispatched_locally, 1);
        crate::telemetry::metrics::claimed(&job.queue, 1);
        tokio::spawn(run_job(self, job, permit));
    }
}
