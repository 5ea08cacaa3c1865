//! The fencing proof, on both stores: a worker whose lease expired cannot write while the
//! worker that reclaimed its job is still running.
//!
//! Worker A claims a job and its handler stalls; A's lease expires, the job is rescued and
//! worker B claims it. While B holds the current claim and is parked mid-job, the job is
//! `running`, so a state guard alone would let A through: only the fence can refuse A.
//! With its stale claim A tries, each refused with a lost lease (or, for the batch
//! statements, absent from the answer): its effect transaction (`cx.begin()`, the fence
//! check of `job/lock.sql`; its handler would write its effect row and complete in it);
//! an effect claim, a ledger post and a counter number on a store transaction that
//! skipped that check (each statement carries the fence itself; the transaction is
//! committed, so a write that slipped through would stay); its completion, failure (retry
//! and dead) and snooze; its heartbeat and batched completion; and the engine's own
//! completion when A's handler returns `Ok`. B's claim is left exactly as it was. Then B
//! is released: the effect table holds B's row alone, no ledger entry or counter number
//! exists, the job is completed under B's fence, and the history shows A's attempt as
//! `lease_expired`. `scripts/mutate-fences` removes each fence predicate from each
//! store's SQL in turn and checks that this proof then fails (run by hand).
//!
//! Where B parks. PostgreSQL: inside its effect transaction, after its fence check and
//! before its effect claim. It holds the job row `FOR KEY SHARE` (checked: `FOR UPDATE
//! NOWAIT` on the row is refused), which none of A's statements waits for (an `UPDATE`
//! that changes no key takes `FOR NO KEY UPDATE`), so A is refused while B holds the row;
//! and it has not inserted its effect key yet, which a stale effect claim stripped of its
//! fence would wait for, while B commits only when the test releases it. SQLite: just
//! before its effect transaction, because an open one holds the only writer, and every
//! write of A would queue behind B in the same way.
//!
//! Also here: a cancel fences out the running worker, and the heartbeat tells a handler
//! whose job was reclaimed that its lease is lost.
//!
//! Time is injected. Worker A runs on a clock frozen at t0, so its heartbeats (if any
//! fire) extend the lease only to t0 + lease; the test and worker B run on a clock moved
//! past the lease. Every wait is on a signal.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use idem::{
    AttemptOutcome, Backend, EffectClass, Handler, Idem, IdemError, Job, JobContext, JobError,
    JobRow, JobState, LeaseToken, ManualClock, StoreError, Timestamp, WorkerHandle, WorkerReport,
};
use idem_store::{
    CounterNext, EffectClaim, JobComplete, JobCompleteMany, JobFail, LedgerPost, StoreResult,
    StoreTx,
};
use idem_store_tests::fixture::{LEASE_MS, assert_lease_lost, heartbeat};
use idem_store_tests::{TestDb, harness::within};
use tokio::sync::oneshot;

/// Worker A's handler: reports that it started (with its claim) and waits to be
/// released; then does what a handler does (opens its effect transaction, writes its effect row, completes) and
/// reports how `begin` answered. It returns `Ok`, so the engine completes with the
/// claim's fence as well.
struct Stalled {
    started: Once<LeaseToken>,
    release: Gate,
    begun: Once<Result<(), IdemError>>,
}

impl Handler for Stalled {
    const KIND: &'static str = EFFECT_KIND;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let lease = cx.lease();
        self.started.fire(lease).await;
        self.release.wait().await;
        let begun = match cx.begin().await {
            Ok(tx) => {
                // Wrongly accepted: the test finds the row if it commits.
                let _ = write_and_complete(tx, lease, "A").await;
                Ok(())
            }
            Err(e) => Err(e),
        };
        self.begun.fire(begun).await;
        Ok(())
    }
}

/// Starts a worker of the test queue running `handler`; returns once `ready` fires,
/// with what it sent.
async fn start_worker<H: Handler, T>(
    idem: &Idem,
    handler: H,
    ready: oneshot::Receiver<T>,
    what: &str,
) -> (WorkerHandle, T) {
    let mut w = idem.worker(config("fence", 1)).unwrap();
    w.register(handler).unwrap();
    let handle = w.start();
    let sent = within(30, what, ready).await.unwrap();
    (handle, sent)
}

/// A worker running [`Stalled`], which has started its job under `lease`.
struct StalledWorker {
    handle: WorkerHandle,
    lease: LeaseToken,
    release: oneshot::Sender<()>,
    begun: oneshot::Receiver<Result<(), IdemError>>,
}

async fn start_stalled(idem: &Idem) -> StalledWorker {
    let (started, started_rx) = Once::new();
    let (release, release_tx) = Gate::new();
    let (begun, begun_rx) = Once::new();
    let stalled = Stalled {
        started,
        release,
        begun,
    };
    let (handle, lease) = start_worker(idem, stalled, started_rx, "A starts the job").await;
    StalledWorker {
        handle,
        lease,
        release: release_tx,
        begun: begun_rx,
    }
}

/// Releases the stalled handler, asserts that its effect transaction was refused with a
/// lost lease, and shuts its worker down.
async fn release_stalled(a: StalledWorker) -> WorkerReport {
    a.release.send(()).unwrap();
    let begun = within(30, "A's handler reports", a.begun).await.unwrap();
    assert!(
        matches!(&begun, Err(e) if e.is_lease_lost()),
        "A's cx.begin() must be refused with LeaseLost, got {begun:?}"
    );
    within(30, "A shuts down", a.handle.shutdown()).await
}

/// Worker B's handler: parks on a gate while it holds the current claim, inside its
/// effect transaction when `inside`, else just before opening it (see the module docs);
/// once released, writes its effect row and completes, and reports its fence and whether
/// its effect key was new.
struct Parked {
    inside: bool,
    parked: Once<()>,
    release: Gate,
    done: Once<(i64, bool)>,
}

impl Parked {
    async fn park(&self) {
        self.parked.fire(()).await;
        self.release.wait().await;
    }
}

impl Handler for Parked {
    const KIND: &'static str = EFFECT_KIND;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let lease = cx.lease();
        if !self.inside {
            self.park().await;
        }
        let tx = cx.begin().await?;
        if self.inside {
            self.park().await;
        }
        let new = write_and_complete(tx, lease, "B").await?;
        self.done.fire((lease.fence, new)).await;
        Ok(())
    }
}

/// A worker running [`Parked`], which has claimed its job and parked.
struct ParkedWorker {
    handle: WorkerHandle,
    release: oneshot::Sender<()>,
    done: oneshot::Receiver<(i64, bool)>,
}

async fn start_parked(idem: &Idem, backend: Backend) -> ParkedWorker {
    let (parked, parked_rx) = Once::new();
    let (release, release_tx) = Gate::new();
    let (done, done_rx) = Once::new();
    let parked = Parked {
        inside: backend == Backend::Postgres,
        parked,
        release,
        done,
    };
    let (handle, ()) = start_worker(idem, parked, parked_rx, "B claims the job and parks").await;
    ParkedWorker {
        handle,
        release: release_tx,
        done: done_rx,
    }
}

/// Worker A's client on a clock frozen at `t0` (its heartbeats never reach past t0 +
/// lease), worker B's and the test's on a clock that can move past it, an effect table,
/// and one job enqueued at `t0`.
struct Scene {
    a: Idem,
    b: Idem,
    moving: Arc<ManualClock>,
    t0: Timestamp,
    job: JobRow,
}

async fn two_clocks(db: &TestDb) -> Scene {
    let frozen = db_clock(db).await;
    let t0 = frozen.get();
    let moving = Arc::new(ManualClock::new(t0));
    let a = client(db, Some(Arc::new(frozen)));
    let b = client(db, Some(moving.clone()));
    create_effect_table(&b).await;
    let job = enqueue_one(&b).await;
    Scene {
        a,
        b,
        moving,
        t0,
        job,
    }
}

/// Enqueues one job of the effect kind in the queue the workers here serve.
async fn enqueue_one(idem: &Idem) -> JobRow {
    let job = Job::new(EFFECT_KIND, serde_json::json!({})).queue("fence");
    idem.enqueue(job).await.unwrap().job
}

/// Moves the clock past A's lease (`stale`), rescues the job and lets B claim it; returns
/// B, parked, and its claim as stored.
async fn b_reclaims(db: &TestDb, s: &Scene, stale: LeaseToken) -> (ParkedWorker, JobRow) {
    s.moving.advance(Duration::from_secs(31));
    let rescued = s.b.rescue().await.unwrap();
    assert_eq!(
        rescued.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![s.job.id]
    );
    let b = start_parked(&s.b, db.backend).await;
    let claim = common::job(&s.b, s.job.id).await;
    assert_eq!(
        (claim.state, claim.fence),
        (JobState::Running, stale.fence + 1)
    );
    assert_eq!(claim.lease_owner.as_deref(), Some(b.handle.name()));
    if db.backend == Backend::Postgres {
        assert_row_held(db, claim.id).await;
    }
    (b, claim)
}

/// PostgreSQL: the job's row is locked by an open transaction (B's effect transaction
/// holds it `FOR KEY SHARE`), so `FOR UPDATE NOWAIT` cannot take it.
async fn assert_row_held(db: &TestDb, id: i64) {
    let mut tx = db.store.begin().await.unwrap();
    let sql = "SELECT id FROM idem_job WHERE id = $1 FOR UPDATE NOWAIT";
    let taken = tx.query(sql, &[id.into()]).await;
    tx.rollback().await.unwrap();
    assert!(
        matches!(taken, Err(StoreError::Busy(_))),
        "B's effect transaction must hold the job row, got {taken:?}"
    );
}

/// A write a claim makes inside its transaction, whose statement checks the fence itself.
#[derive(Debug, Clone, Copy)]
enum RawWrite {
    EffectClaim,
    LedgerPost,
    CounterNext,
}

impl RawWrite {
    /// Makes this write for the claim `lease` in `tx`; returns its answer, printed.
    async fn make(
        self,
        tx: &mut dyn StoreTx,
        lease: LeaseToken,
        now: Option<Timestamp>,
    ) -> StoreResult<String> {
        let id = lease.job_id;
        match self {
            RawWrite::EffectClaim => {
                let key = effect_key(id);
                let (kind, key) = (key.kind().to_owned(), key.render().unwrap());
                let params = EffectClaim {
                    key,
                    kind,
                    lease,
                    now,
                };
                tx.effect_claim(params).await.map(|a| format!("{a:?}"))
            }
            RawWrite::LedgerPost => {
                let account = "test-account".to_owned();
                let entry_key = format!("test-entry:{id}");
                let params = LedgerPost {
                    entry_key,
                    account,
                    amount: 100,
                    lease,
                    now,
                };
                tx.ledger_post(params).await.map(|a| format!("{a:?}"))
            }
            RawWrite::CounterNext => {
                let (counter, key) = ("test-counter".to_owned(), format!("test-number:{id}"));
                let params = CounterNext {
                    counter,
                    key,
                    lease,
                    now,
                };
                tx.counter_next(params).await.map(|a| format!("{a:?}"))
            }
        }
    }
}

/// Makes `write` with the stale claim `lease` on a store transaction opened without the
/// fence check of `job/lock.sql`, as a worker that skipped `cx.begin()` would, and
/// commits it; returns the write's answer.
async fn raw_write(
    db: &TestDb,
    write: RawWrite,
    lease: LeaseToken,
    t0: Timestamp,
) -> StoreResult<String> {
    let mut tx = db.store.begin().await.expect("begin");
    let answer = write.make(tx.as_mut(), lease, Some(t0)).await;
    tx.commit().await.expect("commit the stale transaction");
    answer.map(|a| format!("{write:?} accepted: {a}"))
}

/// The stale claim `stale` tries every final write of a claim; each is refused.
async fn refuse_final_writes(db: &TestDb, stale: LeaseToken, t0: Timestamp) {
    let now = Some(t0);
    let complete = JobComplete {
        lease: stale,
        result: None,
        now,
    };
    assert_lease_lost(db.store.job_complete(complete).await, stale);
    // A retry, a dead letter, a snooze.
    for (retry_in_ms, snooze) in [(Some(1_000), false), (None, false), (Some(1_000), true)] {
        let error = "a stale failure".to_owned();
        let fail = JobFail {
            lease: stale,
            error,
            retry_in_ms,
            snooze,
            now,
        };
        assert_lease_lost(db.store.job_fail(fail).await, stale);
    }
    let renewed = heartbeat(db, vec![stale], LEASE_MS, t0).await;
    assert!(renewed.is_empty(), "a stale heartbeat renewed {renewed:?}");
    let many = JobCompleteMany {
        leases: vec![stale],
        results: Vec::new(),
        now,
    };
    let completed = db.store.job_complete_many(many).await.unwrap();
    assert!(
        completed.is_empty(),
        "a stale batched completion completed {completed:?}"
    );
}

/// Rows of a caller's query whose columns are all integers.
async fn ints(idem: &Idem, sql: &str) -> Vec<Vec<i64>> {
    let rows = idem.store().query(sql, &[]).await.unwrap();
    let int = |v: &idem::SqlValue| v.as_i64().expect("an integer column");
    rows.iter().map(|r| r.iter().map(int).collect()).collect()
}

/// After B committed: B's effect row and effect key alone, no ledger entry or counter
/// number, the job completed under B's fence, and A's attempt recorded as lost.
async fn assert_only_b_committed(idem: &Idem, b_claim: &JobRow) {
    let (id, fence) = (b_claim.id, b_claim.fence);
    assert_eq!(effects(idem).await, vec![(id, fence, "B".to_owned())]);
    let keys = ints(idem, "SELECT job_id, fence FROM idem_effect").await;
    assert_eq!(keys, vec![vec![id, fence]]);
    let entries = "SELECT (SELECT count(*) FROM idem_ledger_entry), \
                   (SELECT count(*) FROM idem_counter_number)";
    assert_eq!(ints(idem, entries).await, vec![vec![0, 0]]);
    let after = common::job(idem, id).await;
    assert_eq!(
        (after.state, after.fence, after.attempt),
        (JobState::Completed, fence, 2)
    );
    let history = idem.attempts(id).await.unwrap();
    let outcomes: Vec<_> = history.iter().map(|a| (a.fence, a.outcome)).collect();
    assert_eq!(
        outcomes,
        vec![
            (fence - 1, AttemptOutcome::LeaseExpired),
            (fence, AttemptOutcome::Completed)
        ]
    );
}

/// The proof: while B holds the current claim and runs, every write of A's stale claim
/// is refused by the fence, and B's commit is the only one.
async fn stale_worker_is_refused_while_the_new_one_runs(db: &TestDb) {
    let s = two_clocks(db).await;
    let a = start_stalled(&s.a).await;
    let stale = a.lease;
    let first = (s.job.id, s.job.fence + 1);
    assert_eq!(
        (stale.job_id, stale.fence),
        first,
        "A holds the first claim"
    );
    let (b, b_claim) = b_reclaims(db, &s, stale).await;

    for write in [
        RawWrite::EffectClaim,
        RawWrite::LedgerPost,
        RawWrite::CounterNext,
    ] {
        assert_lease_lost(raw_write(db, write, stale, s.t0).await, stale);
    }
    refuse_final_writes(db, stale, s.t0).await;
    let report_a = release_stalled(a).await;
    assert_eq!(
        (report_a.completed, report_a.lease_lost),
        (0, 1),
        "the engine's stale completion must be refused"
    );
    assert!(effects(&s.b).await.is_empty(), "A wrote its effect row");
    let now = common::job(&s.b, s.job.id).await;
    assert_eq!(now, b_claim, "A's attempts must leave B's claim as it was");

    b.release.send(()).unwrap();
    let done = within(30, "B commits", b.done).await.unwrap();
    assert_eq!(done, (b_claim.fence, true), "B's effect key was new");
    let report_b = within(30, "B shuts down", b.handle.shutdown()).await;
    assert_eq!((report_b.completed, report_b.lease_lost), (1, 0));
    assert_only_b_committed(&s.b, &b_claim).await;
}

/// A cancelled running job fences its worker out the same way.
async fn cancel_fences_out_the_running_worker(db: &TestDb) {
    let idem = client(db, None);
    create_effect_table(&idem).await;
    let job = enqueue_one(&idem).await;
    let a = start_stalled(&idem).await;
    let cancelled = idem.cancel(job.id).await.unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);
    let report = release_stalled(a).await;
    assert_eq!((report.completed, report.lease_lost), (0, 1));
    assert_eq!(common::job(&idem, job.id).await.state, JobState::Cancelled);
    assert!(effects(&idem).await.is_empty());
}

/// Waits until the worker's heartbeat reports its claim lost, then tries to write.
struct WaitsForLoss {
    started: Once<()>,
    refused: Once<bool>,
}

impl Handler for WaitsForLoss {
    const KIND: &'static str = EFFECT_KIND;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        self.started.fire(()).await;
        cx.lease_lost().await;
        let refused = match cx.begin().await {
            Ok(_) => false,
            Err(e) => e.is_lease_lost(),
        };
        self.refused.fire(refused && cx.is_lease_lost()).await;
        Ok(())
    }
}

/// The heartbeat tells a handler whose job was reclaimed that its lease is lost.
async fn heartbeat_tells_a_stale_handler(db: &TestDb) {
    let s = two_clocks(db).await;
    let (started, started_rx) = Once::new();
    let (refused, refused_rx) = Once::new();
    let cfg = config("fence", 1).lease(Duration::from_millis(300));
    let mut a = s.a.worker(cfg).unwrap();
    a.register(WaitsForLoss { started, refused }).unwrap();
    let a = a.start();
    within(30, "A starts", started_rx).await.unwrap();
    s.moving.advance(Duration::from_secs(31));
    // A's heartbeat still runs (every 100 ms) and briefly locks the job's row; on
    // PostgreSQL the rescue skips a locked row (SKIP LOCKED), so a sweep that meets one
    // rescues nothing and the next one takes it.
    let mut rescued = 0;
    for _ in 0..100 {
        rescued = s.b.rescue().await.unwrap().len();
        if rescued > 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(rescued, 1);
    let (done, done_rx) = Once::new();
    let mut b = s.b.worker(config("fence", 1)).unwrap();
    b.register(WriteEffect { worker: "B", done }).unwrap();
    let b = b.start();
    within(30, "B completes", done_rx).await.unwrap();
    let refused = within(30, "A hears of the loss", refused_rx).await.unwrap();
    assert!(refused, "A learns of the loss and its write is refused");
    within(30, "A shuts down", a.shutdown()).await;
    within(30, "B shuts down", b.shutdown()).await;
    assert_eq!(effects(&s.b).await.len(), 1);
    assert_eq!(common::job(&s.b, s.job.id).await.state, JobState::Completed);
}

idem_store_tests::store_cases!(
    stale_worker_is_refused_while_the_new_one_runs,
    cancel_fences_out_the_running_worker,
    heartbeat_tells_a_stale_handler
);
