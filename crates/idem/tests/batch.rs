//! Batches on both stores: however a batch's children finish, the batch counts each
//! child once and exactly one successor is enqueued and runs.
//!
//! - 1,000 children finishing on three workers of three clients (on PostgreSQL three
//!   connection pools, truly concurrent), half completed in their effect transaction
//!   and half by the worker's batched completer: both paths count.
//! - The last two children held at a barrier and released together, so their
//!   completions race (on PostgreSQL inside their effect transactions, right before
//!   `tx.complete()`; on SQLite, whose one writer would make that a deadlock, right
//!   before `cx.begin()`): one successor, every child counted. Six rounds, alternating a
//!   batch of the two alone (neighbouring ids: two count shards) and one where they are
//!   `SHARDS` ids apart (one shard) with the children between them finished first.
//! - A child reclaimed after its lease expired (injected time) and completed by the
//!   worker that reclaimed it: the stale run, released after the successor ran, is
//!   refused (in its effect transaction and in the worker's completion) and counts
//!   nothing.
//! - Dead children: the successor runs and reads them (default policy); with `on_dead`
//!   the failure successor runs instead; an operator's retry of the dead child after
//!   the successor ran moves the counts and enqueues no second successor.
//! - Results: the successor sums its children's results a page at a time.
//!
//! The successor's handler records every run on a channel, with the batch as
//! `cx.batch()` showed it and the children as it read them through
//! `Idem::batch_children`; every wait is on such a signal.
//!
//! What turns them red (each checked once on a copy of the tree): the batched completer
//! not counting (`job_complete_many` without its settle): the 1,000 children stall at
//! 500 completed; the shards read before the batch row is locked: on PostgreSQL the race
//! stalls at 2/2 with no successor (and the 1,000 children sometimes do); a shard's count
//! computed from the statement's snapshot instead of the locked row: the one-shard race
//! loses a count (16 of 17); a finished batch due again and its successor without its
//! key: the retried dead child makes a second successor.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use idem::{
    AttemptOutcome, Backend, Batch, BatchRow, BatchState, DeadFilter, EffectClass, Handler, Idem,
    Job, JobContext, JobError, JobList, JobRow, JobState, LeaseToken, WorkerConfig, WorkerHandle,
    WorkerReport,
};
use idem_store::batch::{SHARDS, shard_of};
use idem_store_tests::{TestDb, harness::within, open_store};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::{Barrier, mpsc, watch};

const QUEUE: &str = "batch";
const CHILD: &str = "child";
const DONE: &str = "batch-done";
const FAILED: &str = "batch-failed";

/// How a child finishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Finish {
    /// Sets its result and completes in its effect transaction (`tx.complete()`).
    InTx,
    /// Sets its result and returns `Ok`: the worker's batched completer completes it.
    Returned,
    /// Fails permanently on its first claim (fence 1), so it is dead; a later claim (an
    /// operator's retry) completes in its effect transaction.
    Dies,
}

#[derive(Debug, Deserialize)]
struct ChildArgs {
    n: i64,
    finish: Finish,
    /// Parks its first claim on the handler's [`Stall`].
    #[serde(default)]
    stall: bool,
    /// Meets the other racer at the handler's [`Race`] barrier.
    #[serde(default)]
    race: bool,
}

fn child(n: i64, finish: Finish) -> Job {
    Job::new(CHILD, json!({"n": n, "finish": finish})).queue(QUEUE)
}

fn stalled_child(n: i64, finish: Finish) -> Job {
    Job::new(CHILD, json!({"n": n, "finish": finish, "stall": true})).queue(QUEUE)
}

/// Alternately completed in the effect transaction and by the worker.
fn mixed(n: i64) -> Job {
    child(
        n,
        if n % 2 == 0 {
            Finish::InTx
        } else {
            Finish::Returned
        },
    )
}

fn successor() -> Job {
    Job::new(DONE, json!({})).queue(QUEUE)
}

fn failure_successor() -> Job {
    Job::new(FAILED, json!({})).queue(QUEUE)
}

/// Racing children: where they meet right before they complete (see the module docs),
/// and what each saw there.
struct Race {
    barrier: Arc<Barrier>,
    backend: Backend,
    /// Per racer, past the barrier: its batch's unfinished children (the two racers).
    met: mpsc::UnboundedSender<i64>,
}

/// Parks the first claim of a stalled child until released, and reports it.
struct Stall {
    started: mpsc::UnboundedSender<LeaseToken>,
    release: watch::Receiver<bool>,
    /// Per stalled child: its claim, and whether its handler was refused with a lost
    /// lease (`None`: the handler returned `Ok`, the worker's completion follows).
    refused: mpsc::UnboundedSender<(LeaseToken, Option<bool>)>,
}

/// Holds every job of each worker until `workers` workers have each started one, so
/// that all of them take part (one worker holds at most its concurrency, and the others
/// claim the rest meanwhile).
struct Meet {
    /// Set by a worker's first job.
    started: std::sync::atomic::AtomicBool,
    /// How many workers have started a job.
    count: watch::Sender<usize>,
    workers: usize,
}

impl Meet {
    async fn wait(&self) {
        if !self.started.swap(true, std::sync::atomic::Ordering::AcqRel) {
            self.count.send_modify(|n| *n += 1);
        }
        let mut all = self.count.subscribe();
        let _ = all.wait_for(|n| *n >= self.workers).await;
    }
}

/// The children's handler: finishes as its args say, setting the result `{"n": n}`.
#[derive(Default)]
struct Child {
    race: Option<Race>,
    stall: Option<Stall>,
    meet: Option<Meet>,
    /// Told (n, claim) after a completion in the effect transaction committed.
    completed: Option<mpsc::UnboundedSender<(i64, LeaseToken)>>,
}

impl Handler for Child {
    const KIND: &'static str = CHILD;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = ChildArgs;

    async fn run(&self, cx: &mut JobContext, args: ChildArgs) -> Result<(), JobError> {
        if let Some(meet) = &self.meet {
            meet.wait().await;
        }
        let lease = cx.lease();
        let stall = self
            .stall
            .as_ref()
            .filter(|_| args.stall && lease.fence == 1);
        if let Some(s) = stall {
            let _ = s.started.send(lease);
            let mut release = s.release.clone();
            let _ = release.wait_for(|r| *r).await;
        }
        let outcome = self.finish(cx, &args).await;
        if let Some(s) = stall {
            let refused = match (&outcome, args.finish) {
                (Ok(()), Finish::Returned) => None,
                (out, _) => Some(out.as_ref().is_err_and(|e| e.is_lease_lost())),
            };
            let _ = s.refused.send((lease, refused));
        }
        outcome
    }
}

impl Child {
    async fn finish(&self, cx: &mut JobContext, args: &ChildArgs) -> Result<(), JobError> {
        let result = json!({"n": args.n});
        match args.finish {
            Finish::Dies if cx.job().fence == 1 => {
                return Err(JobError::permanent(format!(
                    "child {} cannot succeed",
                    args.n
                )));
            }
            Finish::Returned => {
                cx.set_result(result)?;
                return Ok(());
            }
            _ => {}
        }
        let (store, batch_id) = (cx.store().clone(), cx.job().batch_id);
        let meet = |at| self.meet(at, args.race, store.clone(), batch_id);
        meet(Backend::Sqlite).await?;
        let mut tx = cx.begin().await?;
        tx.set_result(result)?;
        meet(Backend::Postgres).await?;
        tx.complete().await?;
        if let Some(done) = &self.completed {
            let _ = done.send((args.n, cx.lease()));
        }
        Ok(())
    }

    /// A racer on store `at` waits for the other at the barrier, reports its batch's
    /// unfinished children, and waits again, so that both go on at the same instant.
    async fn meet(
        &self,
        at: Backend,
        racer: bool,
        store: Arc<dyn idem::Store>,
        batch_id: Option<i64>,
    ) -> Result<(), JobError> {
        let Some(race) = self.race.as_ref().filter(|r| racer && r.backend == at) else {
            return Ok(());
        };
        race.barrier.wait().await;
        let batch = store.batch_get(batch_id.expect("a child")).await?;
        let _ = race
            .met
            .send(batch.expect("its batch").unfinished_children());
        // Both have read the batch: released together.
        race.barrier.wait().await;
        Ok(())
    }
}

/// One run of a batch's successor.
#[derive(Debug)]
struct SuccessorRun {
    job: JobRow,
    /// The batch as `cx.batch()` showed it.
    batch: BatchRow,
    /// Every child, read a page at a time with `Idem::batch_children`.
    children: Vec<JobRow>,
    /// The size of each page read.
    pages: Vec<usize>,
}

impl SuccessorRun {
    /// The sum of the children's results `{"n": n}` (a child without one adds nothing).
    fn sum(&self) -> i64 {
        self.children
            .iter()
            .filter_map(|c| c.result.as_ref()?["n"].as_i64())
            .sum()
    }
}

/// The successor's handler: reads its batch and its children, and records the run.
struct Successor {
    idem: Idem,
    page: u32,
    runs: mpsc::UnboundedSender<SuccessorRun>,
}

impl Successor {
    async fn record(&self, cx: &mut JobContext) -> Result<(), JobError> {
        let batch = cx.batch().await?.expect("a successor follows its batch");
        let (mut children, mut pages) = (Vec::new(), Vec::new());
        loop {
            let after = children.last().map(|c: &JobRow| c.id);
            let page = self.idem.batch_children(batch.id, after, self.page).await?;
            if page.is_empty() {
                break;
            }
            pages.push(page.len());
            children.extend(page);
        }
        let run = SuccessorRun {
            job: cx.job().clone(),
            batch,
            children,
            pages,
        };
        let _ = self.runs.send(run);
        Ok(())
    }
}

impl Handler for Successor {
    const KIND: &'static str = DONE;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        self.record(cx).await
    }
}

/// The failure successor's handler: the same record, under its own kind.
struct FailureSuccessor(Successor);

impl Handler for FailureSuccessor {
    const KIND: &'static str = FAILED;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        self.0.record(cx).await
    }
}

/// Starts a worker on `idem` running `child` and both successors (reading children
/// `page` at a time, recording runs on `runs`).
fn start(
    idem: &Idem,
    cfg: WorkerConfig,
    child: Child,
    page: u32,
    runs: &mpsc::UnboundedSender<SuccessorRun>,
) -> WorkerHandle {
    let successor = |runs: &mpsc::UnboundedSender<SuccessorRun>| Successor {
        idem: idem.clone(),
        page,
        runs: runs.clone(),
    };
    let mut w = idem.worker(cfg).unwrap();
    w.register(child).unwrap();
    w.register(successor(runs)).unwrap();
    w.register(FailureSuccessor(successor(runs))).unwrap();
    w.start()
}

/// Another client on the test database, over a store (and, on PostgreSQL, a connection
/// pool) of its own, as another process would have.
async fn other_client(db: &TestDb) -> Idem {
    Idem::from_store(open_store(&db.url).await.expect("open another store"))
}

async fn shutdown_all(workers: Vec<WorkerHandle>) -> Vec<WorkerReport> {
    let mut reports = Vec::new();
    for w in workers {
        reports.push(within(60, "shutdown", w.shutdown()).await);
    }
    reports
}

/// The ids of the jobs that follow batch `batch_id` (its successors), in id order.
async fn successor_ids(idem: &Idem, batch_id: i64) -> Vec<i64> {
    let sql = "SELECT id FROM idem_job WHERE follows_batch_id = $1 ORDER BY id";
    let rows = idem.store().query(sql, &[batch_id.into()]).await.unwrap();
    rows.iter().map(|r| r[0].as_i64().unwrap()).collect()
}

async fn batch(idem: &Idem, id: i64) -> BatchRow {
    idem.batch_get(id).await.unwrap().expect("batch exists")
}

/// Checks that batch `id` finished with `(completed, dead)` of `total` children and
/// exactly one successor, of `kind`, completed on its first attempt; returns it.
async fn assert_one_successor(
    idem: &Idem,
    id: i64,
    total: i64,
    (completed, dead): (i64, i64),
    kind: &str,
) -> JobRow {
    let b = batch(idem, id).await;
    assert_eq!(
        (b.state, b.total, b.completed, b.dead, b.cancelled),
        (BatchState::Finished, total, completed, dead, 0),
        "batch {id}: state, total, completed, dead, cancelled"
    );
    let successors = successor_ids(idem, id).await;
    assert_eq!(successors.len(), 1, "exactly one successor: {successors:?}");
    assert_eq!(b.successor_job_id, Some(successors[0]));
    let s = job(idem, successors[0]).await;
    assert_eq!(
        (s.kind.as_str(), s.follows_batch, s.enqueue_key.clone()),
        (kind, Some(id), Some(format!("batch:{id}:done")))
    );
    assert_eq!((s.state, s.attempt), (JobState::Completed, 1));
    s
}

/// The next successor run, within 120 s; a batch that does not finish by then fails
/// the test showing its row and its children by state.
async fn next_run(
    runs: &mut mpsc::UnboundedReceiver<SuccessorRun>,
    idem: &Idem,
    batch_id: i64,
) -> SuccessorRun {
    match tokio::time::timeout(Duration::from_secs(120), runs.recv()).await {
        Ok(run) => run.expect("the successors' channel is open"),
        Err(_) => panic!(
            "no successor ran within 120 s; batch {batch_id}: {:?}",
            idem.batch_status(batch_id).await
        ),
    }
}

/// Checks, after the workers stopped, that no other successor run was recorded.
fn assert_no_other_run(runs: &mut mpsc::UnboundedReceiver<SuccessorRun>) {
    if let Ok(again) = runs.try_recv() {
        panic!("the successor ran again: {again:?}");
    }
}

async fn a_thousand_children_finishing_on_three_workers_make_one_successor(db: &TestDb) {
    const N: i64 = 1000;
    let idem = client(db, None);
    let added = idem
        .batch(Batch::new(successor()).children((1..=N).map(mixed)))
        .await
        .unwrap();
    let id = added.batch.id;
    let (runs_tx, mut runs) = events();
    let (count, _) = watch::channel(0);
    let mut workers = Vec::new();
    for _ in 0..3 {
        let other = other_client(db).await;
        let child = Child {
            meet: Some(Meet {
                started: Default::default(),
                count: count.clone(),
                workers: 3,
            }),
            ..Child::default()
        };
        workers.push(start(&other, config(QUEUE, 8), child, 100, &runs_tx));
    }
    let run = next_run(&mut runs, &idem, id).await;
    let reports = shutdown_all(workers).await;
    assert_no_other_run(&mut runs);

    let s = assert_one_successor(&idem, id, N, (N, 0), DONE).await;
    assert_eq!(run.job.id, s.id);
    assert_eq!(
        (run.batch.completed, run.batch.dead, run.batch.total),
        (N, 0, N),
        "cx.batch() shows every child completed"
    );
    assert_eq!(run.children.len(), N as usize);
    assert!(run.children.iter().all(|c| c.state == JobState::Completed));
    assert_eq!(run.sum(), N * (N + 1) / 2, "every child's result is kept");
    let completed: u64 = reports.iter().map(|r| r.completed).sum();
    let lost: u64 = reports.iter().map(|r| r.lease_lost).sum();
    assert_eq!((completed, lost), (N as u64 + 1, 0), "reports: {reports:?}");
    assert!(
        reports.iter().all(|r| r.completed > 0),
        "the children finished on every worker: {reports:?}"
    );
    let status = idem.batch_status(id).await.unwrap().unwrap();
    assert_eq!(status.count(JobState::Completed), N);
}

/// A round's children: two racers claimed after every other child (priority 1), next to
/// each other (`spread` false: neighbouring ids, two count shards), or with `SHARDS - 1`
/// children between them (ids `SHARDS` apart: one shard).
fn race_children(spread: bool) -> Vec<Job> {
    let racer = |n| {
        Job::new(CHILD, json!({"n": n, "finish": Finish::InTx, "race": true}))
            .queue(QUEUE)
            .priority(1)
    };
    let between = if spread { SHARDS - 1 } else { 0 };
    let mut children = vec![racer(1)];
    children.extend((2..2 + between).map(mixed));
    children.push(racer(2 + between));
    children
}

async fn the_last_two_children_finishing_together_make_one_successor(db: &TestDb) {
    let idem = client(db, None);
    let barrier = Arc::new(Barrier::new(2));
    let (met_tx, mut met) = events();
    let (runs_tx, mut runs) = events();
    let mut workers = Vec::new();
    // One slot per worker: once both racers are claimed, no other child is running, and
    // every other child was claimed (and finished) before them.
    for _ in 0..2 {
        let other = other_client(db).await;
        let racer = Child {
            race: Some(Race {
                barrier: barrier.clone(),
                backend: db.backend,
                met: met_tx.clone(),
            }),
            ..Child::default()
        };
        workers.push(start(&other, config(QUEUE, 1), racer, 10, &runs_tx));
    }
    let mut batches = Vec::new();
    for round in 0..6 {
        let spread = round % 2 == 1;
        let children = race_children(spread);
        let total = children.len() as i64;
        let added = idem
            .batch(Batch::new(successor()).children(children))
            .await
            .unwrap();
        let (first, last) = (&added.children[0].job, &added.children.last().unwrap().job);
        assert_eq!(
            shard_of(first.id) == shard_of(last.id),
            spread,
            "round {round}: racers {} and {} in the shards intended",
            first.id,
            last.id
        );
        let run = next_run(&mut runs, &idem, added.batch.id).await;
        for _ in 0..2 {
            let unfinished = within(5, "the racers met", met.recv()).await.unwrap();
            assert_eq!(unfinished, 2, "round {round}: the racers are the last two");
        }
        assert_eq!(run.job.follows_batch, Some(added.batch.id));
        assert_eq!((run.batch.completed, run.batch.total), (total, total));
        batches.push((added.batch.id, total, run.job.id));
    }
    let reports = shutdown_all(workers).await;
    assert_no_other_run(&mut runs);
    for (id, total, ran) in batches {
        let s = assert_one_successor(&idem, id, total, (total, 0), DONE).await;
        assert_eq!(s.id, ran);
    }
    let lost: u64 = reports.iter().map(|r| r.lease_lost).sum();
    assert_eq!(lost, 0, "reports: {reports:?}");
}

/// Worker A's stall: the claims it parks, the release, and how each stalled run ended.
struct StallSignals {
    started: mpsc::UnboundedReceiver<LeaseToken>,
    release: watch::Sender<bool>,
    refused: mpsc::UnboundedReceiver<(LeaseToken, Option<bool>)>,
}

fn stall() -> (Stall, StallSignals) {
    let (started_tx, started) = events();
    let (release, release_rx) = watch::channel(false);
    let (refused_tx, refused) = events();
    let stall = Stall {
        started: started_tx,
        release: release_rx,
        refused: refused_tx,
    };
    (
        stall,
        StallSignals {
            started,
            release,
            refused,
        },
    )
}

async fn a_reclaimed_child_counts_once_and_its_stale_run_is_refused(db: &TestDb) {
    let (idem_a, idem_b) = stale_and_live_clients(db).await;
    let children = [
        stalled_child(1, Finish::InTx),
        stalled_child(2, Finish::Returned),
        child(3, Finish::InTx),
        child(4, Finish::InTx),
    ];
    // Created on A's clock, so A can claim the children.
    let added = idem_a
        .batch(Batch::new(successor()).children(children))
        .await
        .unwrap();
    let id = added.batch.id;
    let stalled: Vec<i64> = added.children[..2].iter().map(|c| c.job.id).collect();
    let (runs_tx, mut runs) = events();
    let (hook, mut signals) = stall();
    let (done_tx, mut done) = events();
    let a_child = Child {
        stall: Some(hook),
        completed: Some(done_tx),
        ..Child::default()
    };
    let a = start(&idem_a, config(QUEUE, 4), a_child, 10, &runs_tx);
    for _ in 0..2 {
        let lease = within(30, "A parks a stalled child", signals.started.recv())
            .await
            .unwrap();
        assert_eq!(lease.fence, 1);
        within(30, "A completes an ordinary child", done.recv())
            .await
            .unwrap();
    }

    let rescued = rescue_for_b_only(&idem_b, stalled[0]).await;
    assert_eq!(rescued, stalled, "the stalled children's leases expired");
    let b = start(&idem_b, config(QUEUE, 4), Child::default(), 10, &runs_tx);
    // B completes the reclaimed children, and the successor runs.
    let run = next_run(&mut runs, &idem_b, id).await;
    assert_eq!((run.batch.completed, run.batch.total), (4, 4));

    signals.release.send(true).unwrap();
    let mut refusals = Vec::new();
    for _ in 0..2 {
        let r = within(30, "A's stalled runs end", signals.refused.recv())
            .await
            .unwrap();
        refusals.push((r.0.job_id, r.1));
    }
    refusals.sort_unstable();
    assert_eq!(
        refusals,
        [(stalled[0], Some(true)), (stalled[1], None)],
        "A's effect transaction is refused with a lost lease; the other returned Ok"
    );
    let report_a = within(30, "A shuts down", a.shutdown()).await;
    assert_eq!(
        (report_a.completed, report_a.lease_lost),
        (2, 2),
        "A completed the ordinary children; both stale runs were refused, the one that \
         returned Ok in the worker's completion: {report_a:?}"
    );
    within(30, "B shuts down", b.shutdown()).await;
    assert_no_other_run(&mut runs);

    assert_one_successor(&idem_b, id, 4, (4, 0), DONE).await;
    for (n, job_id) in (1..).zip(&stalled) {
        let row = job(&idem_b, *job_id).await;
        assert_eq!((row.state, row.fence), (JobState::Completed, 2));
        assert_eq!(row.result, Some(json!({"n": n})));
        let outcomes: Vec<_> = idem_b
            .attempts(*job_id)
            .await
            .unwrap()
            .iter()
            .map(|a| a.outcome)
            .collect();
        assert_eq!(
            outcomes,
            [AttemptOutcome::LeaseExpired, AttemptOutcome::Completed]
        );
    }
}

async fn a_dead_child_is_counted_and_shown_to_the_successor(db: &TestDb) {
    let idem = client(db, None);
    let children = [
        child(1, Finish::InTx),
        child(2, Finish::Dies),
        child(3, Finish::Returned),
        child(4, Finish::InTx),
        child(5, Finish::Returned),
    ];
    let added = idem
        .batch(Batch::new(successor()).children(children))
        .await
        .unwrap();
    let id = added.batch.id;
    let dead_id = added.children[1].job.id;
    let (runs_tx, mut runs) = events();
    let w = start(&idem, config(QUEUE, 4), Child::default(), 2, &runs_tx);
    let run = next_run(&mut runs, &idem, id).await;
    within(30, "shutdown", w.shutdown()).await;
    assert_no_other_run(&mut runs);

    assert_eq!(run.job.kind, DONE, "the default policy runs the successor");
    assert_eq!(
        (run.batch.completed, run.batch.dead, run.batch.total),
        (4, 1, 5),
        "cx.batch() counts the dead child"
    );
    assert_eq!(run.pages, [2, 2, 1], "read in pages of 2");
    let dead: Vec<_> = run
        .children
        .iter()
        .filter(|c| c.state == JobState::Dead)
        .collect();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, dead_id);
    let error = dead[0].last_error.as_deref().unwrap_or_default();
    assert!(
        error.contains("child 2 cannot succeed"),
        "the page shows the dead child's error, got {error:?}"
    );
    assert_eq!(run.sum(), 1 + 3 + 4 + 5);
    assert_one_successor(&idem, id, 5, (4, 1), DONE).await;
}

async fn a_dead_child_runs_the_failure_successor_instead(db: &TestDb) {
    let idem = client(db, None);
    let children = [
        child(1, Finish::InTx),
        child(2, Finish::Dies),
        child(3, Finish::Returned),
    ];
    let batch_spec = Batch::new(successor())
        .on_dead(failure_successor())
        .children(children);
    let id = idem.batch(batch_spec).await.unwrap().batch.id;
    let (runs_tx, mut runs) = events();
    let w = start(&idem, config(QUEUE, 4), Child::default(), 10, &runs_tx);
    let run = next_run(&mut runs, &idem, id).await;
    within(30, "shutdown", w.shutdown()).await;
    assert_no_other_run(&mut runs);

    assert_eq!(run.job.kind, FAILED, "the failure successor runs");
    assert_eq!((run.batch.completed, run.batch.dead), (2, 1));
    assert_one_successor(&idem, id, 3, (2, 1), FAILED).await;
    let done = idem
        .jobs(JobList {
            kind: Some(DONE.into()),
            limit: 10,
            ..JobList::default()
        })
        .await
        .unwrap();
    assert!(done.is_empty(), "the successor never exists: {done:?}");
}

async fn retrying_a_dead_child_after_the_successor_ran_makes_no_second_successor(db: &TestDb) {
    let idem = client(db, None);
    let children = [
        child(1, Finish::Dies),
        child(2, Finish::InTx),
        child(3, Finish::Returned),
    ];
    let added = idem
        .batch(Batch::new(successor()).children(children))
        .await
        .unwrap();
    let (id, dead_id) = (added.batch.id, added.children[0].job.id);
    let (runs_tx, mut runs) = events();
    let (done_tx, mut done) = events();
    let retried_child = Child {
        completed: Some(done_tx),
        ..Child::default()
    };
    let w = start(&idem, config(QUEUE, 4), retried_child, 10, &runs_tx);
    let run = next_run(&mut runs, &idem, id).await;
    assert_eq!((run.batch.completed, run.batch.dead), (2, 1));
    let before = batch(&idem, id).await;

    let queue = DeadFilter {
        queue: Some(QUEUE.into()),
        kind: None,
    };
    assert_eq!(idem.retry_dead(&queue).await.unwrap(), 1, "the dead child");
    within(30, "the retried child completes", async {
        loop {
            let (n, lease) = done.recv().await.unwrap();
            if n == 1 {
                return lease;
            }
        }
    })
    .await;
    within(30, "shutdown", w.shutdown()).await;
    assert_no_other_run(&mut runs);

    let s = assert_one_successor(&idem, id, 3, (3, 0), DONE).await;
    assert_eq!(s.id, run.job.id);
    let after = batch(&idem, id).await;
    assert_eq!(
        (after.successor_job_id, after.finished_at),
        (before.successor_job_id, before.finished_at),
        "the batch stays finished with its first successor"
    );
    let retried = job(&idem, dead_id).await;
    assert_eq!(
        (retried.state, retried.result),
        (JobState::Completed, Some(json!({"n": 1})))
    );
}

async fn the_successor_sums_its_childrens_results_a_page_at_a_time(db: &TestDb) {
    const N: i64 = 20;
    let idem = client(db, None);
    let id = idem
        .batch(Batch::new(successor()).children((1..=N).map(mixed)))
        .await
        .unwrap()
        .batch
        .id;
    let (runs_tx, mut runs) = events();
    let w = start(&idem, config(QUEUE, 4), Child::default(), 7, &runs_tx);
    let run = next_run(&mut runs, &idem, id).await;
    within(30, "shutdown", w.shutdown()).await;
    assert_no_other_run(&mut runs);

    assert_eq!(run.pages, [7, 7, 6], "three pages of at most 7");
    let ids: Vec<i64> = run.children.iter().map(|c| c.id).collect();
    assert!(ids.is_sorted(), "pages in id order, none twice: {ids:?}");
    assert_eq!(run.sum(), N * (N + 1) / 2, "1 + 2 + … + 20");
    let results: Vec<_> = run.children.iter().map(|c| c.result.clone()).collect();
    let wanted: Vec<_> = (1..=N).map(|n| Some(json!({"n": n}))).collect();
    assert_eq!(
        results, wanted,
        "each child's result, from both completion paths"
    );
    assert_one_successor(&idem, id, N, (N, 0), DONE).await;
}

idem_store_tests::store_cases!(
    a_thousand_children_finishing_on_three_workers_make_one_successor,
    the_last_two_children_finishing_together_make_one_successor,
    a_reclaimed_child_counts_once_and_its_stale_run_is_refused,
    a_dead_child_is_counted_and_shown_to_the_successor,
    a_dead_child_runs_the_failure_successor_instead,
    retrying_a_dead_child_after_the_successor_ran_makes_no_second_successor,
    the_successor_sums_its_childrens_results_a_page_at_a_time,
);
