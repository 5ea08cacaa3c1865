//! The worker runtime: claim loops per queue, one heartbeat for all leases, the rescuer,
//! and graceful shutdown.
//!
//! A job's life in a worker reads as named steps: `claim` (one round trip for up to the
//! free slots of a queue) → `execute` (the handler in its own task, under the job
//! timeout; a panic is a failed attempt, not a dead worker) → `finish` (complete, or
//! fail along the ladder, every write carrying the claim's fence).
//!
//! What must stay true: a slot (semaphore permit) is held from claim until the job's
//! final write, so a worker never holds more leases than its concurrency; a lease the
//! heartbeat finds lost is flagged to the handler and its writes are refused by the store.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use idem_store::{JobClaim, JobFail, JobHeartbeat, JobRow, LeaseToken, StoreError, StoreResult};
use rand::Rng;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinHandle;

use crate::client::Idem;
use crate::completer::Completer;
use crate::config::{Horizon, retry_horizon};
use crate::context::{JobContext, LeaseSignal};
use crate::error::{IdemError, JobError, JobErrorKind};
use crate::handler::{EffectClass, ErasedHandler, Handler, Registered};
use crate::job::{DEFAULT_QUEUE, check_name};
use crate::local::QueueSlots;
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
        let bad = |m: String| Err(IdemError::Config(m));
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

#[derive(Default)]
struct Stats {
    claimed: AtomicU64,
    dispatched_locally: AtomicU64,
    completed: AtomicU64,
    retried: AtomicU64,
    snoozed: AtomicU64,
    dead: AtomicU64,
    lease_lost: AtomicU64,
    panicked: AtomicU64,
    timed_out: AtomicU64,
    rescued: AtomicU64,
}

impl Stats {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn report(&self) -> WorkerReport {
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

/// A claim this worker holds.
struct Held {
    fence: i64,
    lost: Arc<LeaseSignal>,
}

/// A worker being configured; [`Worker::start`] runs it.
pub struct Worker {
    idem: Idem,
    config: WorkerConfig,
    name: String,
    handlers: HashMap<String, Arc<dyn ErasedHandler>>,
}

impl Worker {
    pub(crate) fn new(idem: Idem, config: WorkerConfig) -> Result<Worker, IdemError> {
        config.validate()?;
        let name = config.name.clone().unwrap_or_else(default_name);
        Ok(Worker {
            idem,
            config,
            name,
            handlers: HashMap::new(),
        })
    }

    /// Registers a handler for its kind; a kind registered twice is refused.
    pub fn register<H: Handler>(&mut self, handler: H) -> Result<&mut Self, IdemError> {
        check_name("kind", H::KIND).map_err(|e| IdemError::Config(e.to_string()))?;
        if self.handlers.contains_key(H::KIND) {
            return Err(IdemError::Config(format!(
                "a handler for kind {:?} is already registered on this worker",
                H::KIND
            )));
        }
        if !H::EFFECT.built() {
            tracing::warn!(
                kind = H::KIND,
                class = H::EFFECT.as_str(),
                "this effect class's intent records are not built yet: its jobs run at-least-once, \
                 with no intent record and no reconciliation"
            );
        }
        self.handlers
            .insert(H::KIND.to_owned(), Arc::new(Registered(handler)));
        Ok(self)
    }

    /// The worker's name (its `lease_owner`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The registered kinds with their effect classes, sorted by kind.
    pub fn kinds(&self) -> Vec<(String, EffectClass)> {
        let mut kinds: Vec<_> = self
            .handlers
            .iter()
            .map(|(k, h)| (k.clone(), h.effect()))
            .collect();
        kinds.sort_by(|a, b| a.0.cmp(&b.0));
        kinds
    }

    /// Starts the claim loops, the heartbeat and the rescuer on the current runtime.
    pub fn start(self) -> WorkerHandle {
        let (stop_claims, claims_rx) = watch::channel(false);
        let (stop_upkeep, upkeep_rx) = watch::channel(false);
        let (store, clock) = (self.idem.store.clone(), self.idem.clock.clone());
        let (completer, completer_task) = Completer::start(store, clock, upkeep_rx.clone());
        let shared = Arc::new(Shared {
            completer,
            abort: watch::channel(false).0,
            listening: watch::channel(false).0,
            first_claims: watch::channel(0).0,
            idem: self.idem,
            accepting: AtomicBool::new(true),
            config: self.config,
            name: self.name,
            handlers: self.handlers,
            held: Mutex::new(HashMap::new()),
            stats: Stats::default(),
            running: AtomicUsize::new(0),
            idle: tokio::sync::Notify::new(),
        });
        let mut tasks = Vec::new();
        for (queue, concurrency) in &shared.config.queues {
            let slots = QueueSlots::new(queue.clone(), *concurrency, &shared);
            shared.idem.local.register(&slots);
            let (s, rx) = (shared.clone(), claims_rx.clone());
            tasks.push(tokio::spawn(claim_loop(s, slots, *concurrency, rx)));
        }
        tasks.push(tokio::spawn(listen_loop(shared.clone(), claims_rx.clone())));
        if let Some(every) = shared.config.purge_interval {
            tasks.push(tokio::spawn(purge_loop(
                shared.clone(),
                every,
                claims_rx.clone(),
            )));
        }
        tasks.push(tokio::spawn(rescue_loop(shared.clone(), claims_rx)));
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

fn default_name() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".to_owned());
    let suffix: u16 = rand::rng().random();
    format!("{host}-{}-{suffix:04x}", std::process::id())
}

/// A running worker.
pub struct WorkerHandle {
    shared: Arc<Shared>,
    claim_tasks: Vec<JoinHandle<()>>,
    upkeep_tasks: Vec<JoinHandle<()>>,
    stop_claims: watch::Sender<bool>,
    stop_upkeep: watch::Sender<bool>,
}

impl WorkerHandle {
    /// What the worker did so far.
    pub fn report(&self) -> WorkerReport {
        self.shared.stats.report()
    }

    /// The worker's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Resolves once every queue has had its first claim answered and the worker hears
    /// announcements of new jobs from other processes (on a store with a channel; where
    /// there is none, workers poll).
    pub async fn ready(&self) {
        let queues = self.shared.config.queues.len();
        let mut claimed = self.shared.first_claims.subscribe();
        let _ = claimed.wait_for(|n| *n >= queues).await;
        if self.shared.idem.store.has_channel() {
            let mut listening = self.shared.listening.subscribe();
            let _ = listening.wait_for(|l| *l).await;
        }
    }

    /// Stops claiming, lets running jobs finish for up to the shutdown timeout, then
    /// stops the rest (their attempts fail and they run again later) and returns the
    /// final report.
    pub async fn shutdown(self) -> WorkerReport {
        self.shared.accepting.store(false, Ordering::Release);
        let _ = self.stop_claims.send(true);
        for t in self.claim_tasks {
            let _ = t.await;
        }
        let timeout = self.shared.config.shutdown_timeout;
        if tokio::time::timeout(timeout, self.shared.wait_idle())
            .await
            .is_err()
        {
            tracing::warn!(worker = %self.shared.name, "shutdown timeout reached; stopping running jobs");
            self.shared.abort_all();
            self.shared.wait_idle().await;
        }
        let _ = self.stop_upkeep.send(true);
        for t in self.upkeep_tasks {
            let _ = t.await;
        }
        self.shared.stats.report()
    }
}

pub(crate) struct Shared {
    idem: Idem,
    /// False once shutdown starts: local enqueues no longer hand jobs to this worker.
    accepting: AtomicBool,
    completer: Completer,
    /// Turns true when running jobs must stop (shutdown past its deadline).
    abort: watch::Sender<bool>,
    /// True while the worker listens for announcements from other processes.
    listening: watch::Sender<bool>,
    /// How many queues' claim loops have had their first claim answered.
    first_claims: watch::Sender<usize>,
    config: WorkerConfig,
    name: String,
    handlers: HashMap<String, Arc<dyn ErasedHandler>>,
    held: Mutex<HashMap<i64, Held>>,
    stats: Stats,
    running: AtomicUsize,
    idle: tokio::sync::Notify,
}

impl Shared {
    async fn wait_idle(&self) {
        loop {
            let idle = self.idle.notified();
            if self.running.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }

    fn abort_all(&self) {
        self.abort.send_replace(true);
    }

    fn tokens(&self) -> Vec<LeaseToken> {
        let held = self.held.lock().expect("held lock poisoned");
        held.iter()
            .map(|(id, h)| LeaseToken {
                job_id: *id,
                fence: h.fence,
            })
            .collect()
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
        tokio::spawn(run_job(self, job, permit));
    }
}

async fn claim_loop(
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

/// Waits for at least `need` free slots, then takes as many more as are free, up to
/// `batch`, one permit each. `None` when the worker is stopping.
async fn take_slots(
    slots: &Arc<Semaphore>,
    need: usize,
    batch: usize,
    stop: &mut watch::Receiver<bool>,
) -> Option<Vec<OwnedSemaphorePermit>> {
    let mut first = tokio::select! {
        biased;
        _ = stop.changed() => return None,
        p = slots.clone().acquire_many_owned(need as u32) => p.expect("semaphore never closed"),
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
    let got = jobs.len();
    for (job, permit) in jobs.into_iter().zip(permits) {
        shared.job_started();
        tokio::spawn(run_job(shared.clone(), job, permit));
    }
    got
}

/// One claimed job, from its handler to its final write.
async fn run_job(shared: Arc<Shared>, job: JobRow, _slot: OwnedSemaphorePermit) {
    let outcome = execute(&shared, &job).await;
    finish(&shared, &job, outcome).await;
    shared
        .held
        .lock()
        .expect("held lock poisoned")
        .remove(&job.id);
    shared.job_ended();
}

/// Runs the handler in its own task under the job timeout. `Ok(true)`: the handler
/// completed the job in its effect transaction.
async fn execute(shared: &Arc<Shared>, job: &JobRow) -> Result<bool, JobError> {
    let lost = Arc::new(LeaseSignal::default());
    let held = Held {
        fence: job.fence,
        lost: lost.clone(),
    };
    shared
        .held
        .lock()
        .expect("held lock poisoned")
        .insert(job.id, held);
    let Some(handler) = shared.handlers.get(&job.kind).cloned() else {
        return Err(JobError::retry(unknown_kind(shared, &job.kind)));
    };
    let cx = JobContext::new(job.clone(), shared.idem.clone(), lost);
    // The handler runs in this task: a panic is caught here, and the timeout and a
    // shutdown past its deadline stop it by dropping its future (which rolls back an
    // open effect transaction).
    let run = AssertUnwindSafe(handler.call(cx)).catch_unwind();
    let timeout = shared.config.job_timeout;
    let mut abort = shared.abort.subscribe();
    tokio::select! {
        out = tokio::time::timeout(timeout, run) => match out {
            Ok(Ok((cx, result))) => result.map(|()| cx.completed),
            Ok(Err(panic)) => {
                Stats::add(&shared.stats.panicked, 1);
                let msg = panic_message(panic);
                Err(JobError::retry(format!("handler panicked: {msg}")))
            }
            Err(_) => {
                Stats::add(&shared.stats.timed_out, 1);
                Err(JobError::retry(format!("job timed out after {timeout:?} (job timeout)")))
            }
        },
        _ = abort.wait_for(|a| *a) => Err(JobError::retry(
            "worker shut down before the job finished (shutdown timeout reached)",
        )),
    }
}

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

/// Records the attempt's outcome under the claim's fence.
async fn finish(shared: &Shared, job: &JobRow, outcome: Result<bool, JobError>) {
    let lease = job.lease_token();
    let result = match outcome {
        Ok(true) => Ok(Finished::Completed),
        Ok(false) => match shared.completer.complete(lease).await {
            Ok(true) => Ok(Finished::Completed),
            Ok(false) => Ok(Finished::LeaseLost),
            Err(e) => Err(e),
        },
        Err(e) if e.kind == JobErrorKind::LeaseLost => Ok(Finished::LeaseLost),
        Err(e) => fail(shared, job, e).await,
    };
    let stats = &shared.stats;
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
}

enum Finished {
    Completed,
    Retried,
    Snoozed,
    Dead,
    LeaseLost,
}

async fn fail(shared: &Shared, job: &JobRow, e: JobError) -> StoreResult<Finished> {
    let config = &shared.config;
    let snooze = e.kind == JobErrorKind::Snooze;
    let retry_in = match e.kind {
        JobErrorKind::Permanent => None,
        JobErrorKind::Retry if job.attempt >= config.max_attempts => None,
        _ => Some(e.retry_after.unwrap_or_else(|| {
            let unit: f64 = rand::rng().random();
            config
                .ladder_for(&job.queue, &job.kind)
                .delay(job.attempt, unit)
        })),
    };
    tracing::debug!(job_id = job.id, attempt = job.attempt, error = %e, snooze, "attempt ended without completing");
    let params = JobFail {
        lease: job.lease_token(),
        error: e.message,
        retry_in_ms: retry_in.map(crate::client::millis),
        snooze,
        now: shared.idem.clock.now(),
    };
    write_retrying(|| async {
        let row = shared.idem.store.job_fail(params.clone()).await?;
        Ok(match row.state {
            idem_store::JobState::Dead => Finished::Dead,
            _ if snooze => Finished::Snoozed,
            _ => Finished::Retried,
        })
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

async fn heartbeat_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(shared.config.heartbeat_interval) => {},
            _ = stop.changed() => return,
        }
        let leases = shared.tokens();
        if leases.is_empty() {
            continue;
        }
        let params = JobHeartbeat {
            leases: leases.clone(),
            lease_ms: shared.lease_ms(),
            now: shared.idem.clock.now(),
        };
        match shared.idem.store.job_heartbeat(params).await {
            Ok(renewed) => mark_lost(&shared, &leases, &renewed),
            Err(e) => tracing::warn!(worker = %shared.name, error = %e, "heartbeat failed"),
        }
    }
}

fn mark_lost(shared: &Shared, sent: &[LeaseToken], renewed: &[idem_store::LeaseRenewal]) {
    let kept: HashSet<LeaseToken> = renewed
        .iter()
        .map(|r| LeaseToken {
            job_id: r.job_id,
            fence: r.fence,
        })
        .collect();
    let held = shared.held.lock().expect("held lock poisoned");
    for token in sent {
        let kept = kept.contains(token);
        if let (false, Some(h)) = (kept, held.get(&token.job_id))
            && h.fence == token.fence
            && !h.lost.raise()
        {
            tracing::warn!(job_id = token.job_id, fence = token.fence, "lease lost");
        }
    }
}

/// Wakes the claim loops when another process announces jobs in one of this worker's
/// queues (where the store has a channel); subscribes again after a broken connection.
async fn listen_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let store = shared.idem.store.clone();
    if !store.has_channel() {
        return;
    }
    while !*stop.borrow() {
        let mut wakeups = match store.subscribe().await {
            Ok(Some(w)) => {
                shared.listening.send_replace(true);
                w
            }
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(worker = %shared.name, error = %e, "cannot listen for new jobs; polling");
                tokio::select! {
                    _ = tokio::time::sleep(shared.config.poll_interval) => continue,
                    _ = stop.changed() => return,
                }
            }
        };
        loop {
            let queues = tokio::select! {
                q = wakeups.next() => q,
                _ = stop.changed() => return,
            };
            match queues {
                Ok(q) if q.is_empty() || q.iter().any(|q| shared.config.queues.contains_key(q)) => {
                    shared.idem.waker.local().notify_waiters();
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(worker = %shared.name, error = %e, "listening for new jobs failed; subscribing again");
                    shared.listening.send_replace(false);
                    break;
                }
            }
        }
    }
}

/// Deletes records past their retention every `every`, in bounded batches.
async fn purge_loop(shared: Arc<Shared>, every: Duration, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {},
            _ = stop.changed() => return,
        }
        for target in idem_store::PurgeTarget::ALL {
            // A large backlog goes in many batches; shutdown does not wait for all of them.
            let go_on = || !*stop.borrow();
            let batch = crate::maintenance::DEFAULT_PURGE_BATCH;
            let purged = match shared.idem.purge_cutoff(target).await {
                Ok(before) => {
                    let idem = &shared.idem;
                    idem.purge_while(target, before, batch, |_| {}, go_on).await
                }
                Err(e) => Err(e),
            };
            match purged {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(worker = %shared.name, %target, purged = n, "purged records past their retention")
                }
                Err(e) => {
                    tracing::warn!(worker = %shared.name, %target, error = %e, "purge failed")
                }
            }
        }
    }
}

async fn rescue_loop(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        match shared
            .idem
            .rescue_capped(Some(shared.config.max_attempts))
            .await
        {
            Ok(rows) if !rows.is_empty() => {
                tracing::info!(worker = %shared.name, rescued = rows.len(), "rescued expired leases");
                Stats::add(&shared.stats.rescued, rows.len() as u64);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(worker = %shared.name, error = %e, "rescue failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(shared.config.rescue_interval) => {},
            _ = stop.changed() => return,
        }
    }
}
