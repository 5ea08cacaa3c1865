//! The worker runtime: it runs the jobs of its queues, each under a lease and a fence,
//! and stops gracefully.
//!
//! A worker is configured ([`WorkerConfig`], `config.rs`), given a handler per kind
//! ([`Worker`], `registry.rs`) and started ([`Worker::start`], here) into a set of
//! tasks sharing one state (`shared.rs`): a claim loop per queue (`claim.rs`), a job
//! task per claimed job (`pipeline.rs`, with `delay.rs` deciding what a failed or
//! snoozed attempt waits), one heartbeat for all its leases
//! (`heartbeat.rs`), a listener for other processes' announcements (`listener.rs`) and
//! the batch completer (`crate::completer`). The running worker is a [`WorkerHandle`]
//! (`handle.rs`) that reports what it did ([`WorkerReport`], `report.rs`) and shuts it
//! down. Beside it run the maintenance services (`crate::maintenance`: the rescuer and
//! the purger); today each worker starts them and stops them with its claims.
//!
//! A job's life in a worker reads as named steps:
//! 1. `claim` (one round trip for up to the free slots of a queue; a local enqueue may
//!    hand the job over already claimed instead, `crate::local`);
//! 2. `execute` (the handler in its job's own task, under the job timeout; a panic is
//!    a failed attempt, not a dead worker);
//! 3. `finish` (complete, or fail along the ladder or after the handler's delay,
//!    clamped to the worker's bounds, every write carrying the claim's fence).
//!
//! Meanwhile the heartbeat extends the lease, and flags it to the handler once lost.
//!
//! What must stay true: a slot (semaphore permit) is held from claim until the job's
//! final write, so a worker never holds more leases than its concurrency; a lease the
//! heartbeat finds lost is flagged to the handler and its writes are refused by the
//! store; a shutdown stops claims before it waits for jobs, and the heartbeat and the
//! completer only after them.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::Idem;
use crate::completer::Completer;
use crate::local::QueueSlots;
use crate::maintenance::{Elector, Purger, Rescuer, candidate};

mod claim;
pub(crate) mod config;
mod delay;
mod handle;
mod heartbeat;
mod listener;
mod periodic;
mod pipeline;
mod protocol;
mod registry;
mod report;
mod shared;

pub use config::{POOL_SETTING, WORKER_CONNECTIONS, WorkerConfig};
pub use handle::WorkerHandle;
pub(crate) use pipeline::write_retrying;
pub use protocol::{MAX_CLAIM, MIN_LEASE_MS, ProtocolClaim, WorkerProtocol};
pub use registry::Worker;
pub use report::WorkerReport;
pub(crate) use shared::Shared;

use claim::claim_loop;
use heartbeat::heartbeat_loop;
use listener::listen_loop;
use report::Stats;

impl Worker {
    /// Starts the claim loops, the heartbeat and the rescuer on the current runtime.
    pub fn start(self) -> WorkerHandle {
        let (stop_claims, claims_rx) = watch::channel(false);
        let (stop_upkeep, upkeep_rx) = watch::channel(false);
        let mut this = self;
        let schedules = std::mem::take(&mut this.periodic);
        let (store, clock) = (this.idem.store.clone(), this.idem.clock.clone());
        let (completer, completer_task) = Completer::start(store, clock, upkeep_rx.clone());
        let shared = Shared::new(this, completer);
        let mut tasks = claim_loops(&shared, &claims_rx);
        for p in schedules {
            let (idem, stop) = (shared.idem.clone(), claims_rx.clone());
            tasks.push(tokio::spawn(periodic::periodic_loop(idem, p, stop)));
        }
        tasks.push(tokio::spawn(listen_loop(shared.clone(), claims_rx.clone())));
        tasks.extend(maintenance(&shared, claims_rx));
        let upkeep = vec![
            tokio::spawn(heartbeat_loop(shared.clone(), upkeep_rx)),
            completer_task,
        ];
        WorkerHandle {
            shared,
            claim_tasks: tasks,
            upkeep_tasks: upkeep,
            stop_claims,
            stop_upkeep,
        }
    }
}

/// One claim loop per queue, its slots offered to local enqueues.
fn claim_loops(shared: &Arc<Shared>, stop: &watch::Receiver<bool>) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    for (queue, concurrency) in &shared.config.queues {
        let slots = QueueSlots::new(queue.clone(), *concurrency, shared);
        shared.idem.local.register(&slots);
        let (s, rx) = (shared.clone(), stop.clone());
        tasks.push(tokio::spawn(claim_loop(s, slots, *concurrency, rx)));
    }
    tasks
}

/// The maintenance services this worker runs until `stop`: the purger (unless the
/// config turns it off) and the rescuer, whose rescues count in this worker's report.
fn maintenance(shared: &Arc<Shared>, stop: watch::Receiver<bool>) -> Vec<JoinHandle<()>> {
    let counted = shared.clone();
    let rescued = move |n| Stats::add(&counted.stats.rescued, n);
    maintenance_tasks(&shared.idem, &shared.config, &shared.name, stop, rescued)
}

/// The elector, the purger (unless `config` turns it off) and the rescuer of `owner`,
/// until `stop`: the two duties act while `owner` leads them, elected for a lease of
/// `config.lease`; `rescued` is told how many jobs each sweep that found some moved.
pub(crate) fn maintenance_tasks(
    idem: &Idem,
    config: &WorkerConfig,
    owner: &str,
    stop: watch::Receiver<bool>,
    rescued: impl Fn(u64) + Send + 'static,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    let (leading, led) = watch::channel(None);
    let elector = Elector {
        idem: idem.clone(),
        holder: candidate(owner),
        ttl: config.lease,
    };
    tasks.push(tokio::spawn(elector.run(stop.clone(), leading)));
    if let Some(interval) = config.purge_interval {
        let purger = Purger {
            idem: idem.clone(),
            interval,
            owner: owner.to_owned(),
        };
        tasks.push(tokio::spawn(purger.run(stop.clone(), led.clone())));
    }
    let rescuer = Rescuer {
        idem: idem.clone(),
        max_attempts: Some(config.max_attempts),
        interval: config.rescue_interval,
        owner: owner.to_owned(),
    };
    tasks.push(tokio::spawn(rescuer.run(stop, led, rescued)));
    tasks
}
