//! Chains on both stores: a link's handler writes its effect row (under an effect key)
//! and enqueues the next link (`EffectTx::enqueue`) in one effect transaction, so the
//! successor exists exactly when the effect committed, and once however often the link
//! runs: its enqueue key is `chain:{job_id}:{kind}`.
//!
//! - A chain of five links runs to its end: five jobs, each following the previous one,
//!   each effect once.
//! - A link run twice (its first claim commits the effect and the successor without
//!   completing, then fails and is retried) makes one successor; the retry finds both
//!   done.
//! - A stale claim (lease expired, injected time; rescued) is refused at `cx.begin()` and
//!   enqueues nothing; the claim that reclaims the link makes the one successor.
//! - Real processes: a chain of five links, each killed once mid-job (see
//!   [`a_chain_whose_links_are_each_killed_once_completes_in_order`]).
//!
//! Without the chain key (`tx.enqueue` leaving the successor keyless) the link run twice
//! and the killed chain each make a second successor (checked once on a copy of the
//! tree). The stale claim is refused by the fence check of `cx.begin()` and, behind it,
//! by the completion's own fence guard, which rolls the whole transaction back.

mod common;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use idem::{
    AttemptOutcome, EffectClass, EffectTx, Enqueued, Handler, Idem, IdemError, Job, JobContext,
    JobError, JobRow, JobState, LeaseToken, ManualClock, WorkerConfig, WorkerHandle,
};
use idem_store_tests::{TestDb, harness::within, open_store};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::mpsc;

const QUEUE: &str = "chain";
const LINK: &str = "link";
const END: &str = "chain-end";
const END_QUEUE: &str = "chain-end";

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct LinkArgs {
    /// This link's place in the chain, from 1.
    n: i64,
    /// The last link's place.
    last: i64,
    /// Whether the last link enqueues the end job (in its own queue).
    #[serde(default)]
    end: bool,
}

impl LinkArgs {
    /// What this link enqueues: the next link; after the last one, the end job or nothing.
    fn next(&self) -> Option<Job> {
        if self.n < self.last {
            let next = LinkArgs {
                n: self.n + 1,
                ..*self
            };
            return Some(next.job());
        }
        self.end.then(|| Job::new(END, json!({})).queue(END_QUEUE))
    }

    fn job(self) -> Job {
        Job::new(LINK, json!(self)).queue(QUEUE)
    }
}

/// The first link of a chain of `last` links.
fn first_link(last: i64, end: bool) -> Job {
    LinkArgs { n: 1, last, end }.job()
}

/// One run of a link's effect transaction.
#[derive(Debug, Clone)]
struct LinkRun {
    n: i64,
    job_id: i64,
    fence: i64,
    /// Whether the effect key was new (the effect row was written).
    effect_new: bool,
    /// The successor, as `tx.enqueue` answered.
    next: Option<Enqueued>,
}

/// Writes the link's effect row (if its key, the job's, is new) and enqueues its
/// successor, in `tx`.
async fn effect_and_next(
    tx: &mut EffectTx<'_>,
    lease: LeaseToken,
    worker: &str,
    args: &LinkArgs,
) -> Result<(bool, Option<Enqueued>), IdemError> {
    let new = write_effect(tx, lease, worker).await?;
    let next = match args.next() {
        Some(job) => Some(tx.enqueue(job).await?),
        None => None,
    };
    Ok((new, next))
}

/// Parks a first claim before its effect transaction, then reports whether `cx.begin()`
/// was refused with a lost lease (`None`: it was accepted).
struct Stall {
    started: Once<LeaseToken>,
    release: Gate,
    begun: Once<Option<bool>>,
}

/// The links' handler.
struct Link {
    worker: &'static str,
    runs: mpsc::UnboundedSender<LinkRun>,
    /// The link whose first claim commits its effect transaction without completing,
    /// then fails (so it runs twice).
    fails_after_commit: Option<i64>,
    stall: Option<Stall>,
    /// Every link's first attempt kills the process (the child process of the
    /// process test).
    killed_once: bool,
}

impl Link {
    fn new(worker: &'static str, runs: &mpsc::UnboundedSender<LinkRun>) -> Link {
        Link {
            worker,
            runs: runs.clone(),
            fails_after_commit: None,
            stall: None,
            killed_once: false,
        }
    }

    /// Opens the effect transaction, writes the effect and the successor, and completes
    /// (or only commits); reports the run.
    async fn effect_tx(
        &self,
        cx: &mut JobContext,
        args: &LinkArgs,
        complete: bool,
    ) -> Result<(), JobError> {
        let lease = cx.lease();
        let mut tx = cx.begin().await?;
        let (effect_new, next) = effect_and_next(&mut tx, lease, self.worker, args).await?;
        if complete {
            tx.complete().await?;
        } else {
            tx.commit().await?;
        }
        let _ = self.runs.send(LinkRun {
            n: args.n,
            job_id: lease.job_id,
            fence: lease.fence,
            effect_new,
            next,
        });
        Ok(())
    }

    /// Parks the claim, then tries its effect transaction and reports how `begin`
    /// answered.
    async fn stalled(&self, s: &Stall, cx: &mut JobContext, args: &LinkArgs) -> JobResult {
        s.started.fire(cx.lease()).await;
        s.release.wait().await;
        let outcome = self.effect_tx(cx, args, true).await;
        let refused = outcome.as_ref().err().map(|e| e.is_lease_lost());
        s.begun.fire(refused).await;
        outcome
    }
}

type JobResult = Result<(), JobError>;

impl Handler for Link {
    const KIND: &'static str = LINK;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = LinkArgs;

    async fn run(&self, cx: &mut JobContext, args: LinkArgs) -> JobResult {
        let first = cx.job().fence == 1;
        if self.killed_once && cx.job().attempt == 1 {
            return die(cx, self.worker, &args).await;
        }
        if let Some(s) = self.stall.as_ref().filter(|_| first) {
            return self.stalled(s, cx, &args).await;
        }
        if first && self.fails_after_commit == Some(args.n) {
            self.effect_tx(cx, &args, false).await?;
            return Err(JobError::retry(
                "the link fails after its effect transaction committed",
            ));
        }
        self.effect_tx(cx, &args, true).await
    }
}

/// The end job's handler: reports that it ran.
struct End {
    ended: mpsc::UnboundedSender<JobRow>,
}

impl Handler for End {
    const KIND: &'static str = END;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> JobResult {
        let _ = self.ended.send(cx.job().clone());
        Ok(())
    }
}

fn start(idem: &Idem, cfg: WorkerConfig, link: Link) -> WorkerHandle {
    let mut w = idem.worker(cfg).unwrap();
    w.register(link).unwrap();
    w.start()
}

/// Receives `count` link runs (of any links); returns them sorted by link and fence.
async fn runs_until(
    runs: &mut mpsc::UnboundedReceiver<LinkRun>,
    count: usize,
    what: &str,
) -> Vec<LinkRun> {
    let mut seen = Vec::new();
    within(60, what, async {
        while seen.len() < count {
            seen.push(runs.recv().await.unwrap());
        }
    })
    .await;
    seen.sort_by_key(|r| (r.n, r.fence));
    seen
}

/// The jobs that follow job `id` (its chain successors), in id order.
async fn followers(idem: &Idem, id: i64) -> Vec<JobRow> {
    let sql = "SELECT id FROM idem_job WHERE follows_job_id = $1 ORDER BY id";
    let rows = idem.store().query(sql, &[id.into()]).await.unwrap();
    let mut jobs = Vec::new();
    for r in rows {
        jobs.push(job(idem, r[0].as_i64().unwrap()).await);
    }
    jobs
}

/// The chain from job `first`: each job and the one job following it, to the end;
/// asserts that no job has two followers.
async fn chain_from(idem: &Idem, first: i64) -> Vec<JobRow> {
    let mut chain = vec![job(idem, first).await];
    loop {
        let last = chain.last().unwrap().id;
        let mut next = followers(idem, last).await;
        assert!(
            next.len() <= 1,
            "job {last} has several successors: {next:?}"
        );
        match next.pop() {
            Some(j) => chain.push(j),
            None => return chain,
        }
    }
}

/// Checks that `chain` is `n` links, each following the one before, all completed, and
/// that the effect table holds exactly one row per link; returns the links' ids.
async fn assert_links(idem: &Idem, chain: &[JobRow], n: i64) -> Vec<i64> {
    let links: Vec<&JobRow> = chain.iter().filter(|j| j.kind == LINK).collect();
    let places: Vec<i64> = links
        .iter()
        .map(|j| j.args["n"].as_i64().unwrap())
        .collect();
    assert_eq!(places, (1..=n).collect::<Vec<_>>(), "the links, in order");
    assert_eq!(chain[0].follows_job, None);
    for pair in chain.windows(2) {
        assert_eq!(pair[1].follows_job, Some(pair[0].id), "{pair:?}");
    }
    assert!(chain.iter().all(|j| j.state == JobState::Completed));
    let ids: Vec<i64> = links.iter().map(|j| j.id).collect();
    let effect_jobs: Vec<i64> = effects(idem).await.iter().map(|e| e.0).collect();
    assert_eq!(effect_jobs, ids, "one effect row per link");
    ids
}

async fn a_chain_of_five_links_runs_to_the_end_each_effect_once(db: &TestDb) {
    let idem = client(db, None);
    create_effect_table(&idem).await;
    let first = idem.enqueue(first_link(5, false)).await.unwrap().job;
    let (runs_tx, mut runs) = events();
    let w = start(&idem, config(QUEUE, 4), Link::new("w", &runs_tx));
    let seen = runs_until(&mut runs, 5, "the chain runs to its last link").await;
    let report = within(30, "shutdown", w.shutdown()).await;

    let chain = chain_from(&idem, first.id).await;
    let ids = assert_links(&idem, &chain, 5).await;
    assert_eq!(chain.len(), 5, "the last link enqueues nothing");
    assert!(chain.iter().all(|j| j.attempt == 1));
    for (i, run) in seen.iter().enumerate() {
        assert_eq!((run.job_id, run.fence, run.effect_new), (ids[i], 1, true));
        let next = run.next.as_ref().map(|e| (e.job.id, e.deduplicated));
        assert_eq!(next, ids.get(i + 1).map(|id| (*id, false)));
        let key = run.next.as_ref().and_then(|e| e.job.enqueue_key.clone());
        let wanted = ids.get(i + 1).map(|_| format!("chain:{}:{LINK}", ids[i]));
        assert_eq!(key, wanted, "the chain key of link {}", i + 1);
    }
    assert_eq!((report.completed, report.lease_lost), (5, 0), "{report:?}");
}

async fn a_link_run_twice_enqueues_one_successor(db: &TestDb) {
    let idem = client(db, None);
    create_effect_table(&idem).await;
    let first = idem.enqueue(first_link(2, false)).await.unwrap().job;
    let (runs_tx, mut runs) = events();
    let link = Link {
        fails_after_commit: Some(1),
        ..Link::new("w", &runs_tx)
    };
    let w = start(&idem, immediate_retries(QUEUE, 2), link);
    let seen = runs_until(&mut runs, 3, "link 1 twice and link 2").await;
    let report = within(30, "shutdown", w.shutdown()).await;

    let second = seen[0].next.as_ref().expect("link 1 enqueued link 2");
    assert!(!second.deduplicated);
    let again = seen[1].next.as_ref().expect("the retry enqueued again");
    assert_eq!(
        (seen[1].n, seen[1].fence, seen[1].effect_new),
        (1, 2, false),
        "the retry of link 1 finds its effect done"
    );
    assert_eq!(
        (again.job.id, again.deduplicated),
        (second.job.id, true),
        "and its successor held by the chain key"
    );
    assert_eq!((seen[2].n, seen[2].job_id), (2, second.job.id));
    let chain = chain_from(&idem, first.id).await;
    assert_links(&idem, &chain, 2).await;
    assert_eq!(followers(&idem, first.id).await.len(), 1, "one successor");
    let outcomes: Vec<_> = idem
        .attempts(first.id)
        .await
        .unwrap()
        .iter()
        .map(|a| a.outcome)
        .collect();
    assert_eq!(
        outcomes,
        [AttemptOutcome::Retryable, AttemptOutcome::Completed]
    );
    assert_eq!((report.retried, report.completed), (1, 2), "{report:?}");
}

async fn a_stale_link_enqueues_no_successor(db: &TestDb) {
    let (idem_a, idem_b) = stale_and_live_clients(db).await;
    create_effect_table(&idem_a).await;
    // Enqueued on A's clock, so A can claim it.
    let first = idem_a.enqueue(first_link(2, false)).await.unwrap().job;
    let (runs_tx, mut runs) = events();
    let (started, started_rx) = Once::new();
    let (release, release_tx) = Gate::new();
    let (begun, begun_rx) = Once::new();
    let stalled = Link {
        stall: Some(Stall {
            started,
            release,
            begun,
        }),
        ..Link::new("A", &runs_tx)
    };
    let a = start(&idem_a, config(QUEUE, 1), stalled);
    let lease = within(30, "A claims link 1", started_rx).await.unwrap();
    assert_eq!((lease.job_id, lease.fence), (first.id, 1));

    let rescued = rescue_for_b_only(&idem_b, first.id).await;
    assert_eq!(rescued, [first.id], "A's lease expired");
    release_tx.send(()).unwrap();
    let refused = within(30, "A's handler reports", begun_rx).await.unwrap();
    assert_eq!(refused, Some(true), "A's cx.begin() is refused: lease lost");
    let report_a = within(30, "A shuts down", a.shutdown()).await;
    assert_eq!(report_a.lease_lost, 1, "{report_a:?}");
    assert!(
        followers(&idem_b, first.id).await.is_empty(),
        "the stale claim enqueued nothing"
    );
    assert!(effects(&idem_b).await.is_empty(), "nor wrote its effect");

    let b = start(&idem_b, config(QUEUE, 1), Link::new("B", &runs_tx));
    let seen = runs_until(&mut runs, 2, "B runs link 1 and link 2").await;
    within(30, "B shuts down", b.shutdown()).await;
    assert_eq!((seen[0].n, seen[0].fence), (1, 2));
    let chain = chain_from(&idem_b, first.id).await;
    let ids = assert_links(&idem_b, &chain, 2).await;
    let rows = effects(&idem_b).await;
    assert_eq!(
        rows,
        [(ids[0], 2, "B".to_owned()), (ids[1], 1, "B".to_owned())],
        "B made both effects"
    );
}

// ---- Real processes: each link killed once mid-job ----

const CHILD_ENV: &str = "IDEM_CHAIN_CHILD_URL";
const NOW_ENV: &str = "IDEM_CHAIN_CHILD_NOW_US";
const MARKER: &str = "IDEM_CHAIN_KILLED";
/// Links of the process test's chain.
const LINKS: i64 = 5;

/// Where a link's first attempt kills its process, by the link's place: the three points
/// of `crash.rs` in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    /// Before its effect transaction: nothing committed.
    MidJob,
    /// After its effect transaction committed the effect and the successor, without
    /// completing the job.
    AfterEffectCommit,
    /// Inside its effect transaction, with the effect and the successor written but not
    /// committed.
    InsideEffectTx,
}

impl Point {
    fn of_link(n: i64) -> Point {
        match (n - 1) % 3 {
            0 => Point::MidJob,
            1 => Point::AfterEffectCommit,
            _ => Point::InsideEffectTx,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Point::MidJob => "mid-job",
            Point::AfterEffectCommit => "after-effect-commit",
            Point::InsideEffectTx => "inside-effect-tx",
        }
    }
}

/// Kills the process at the link's point; says so on stdout first.
async fn die(cx: &mut JobContext, worker: &str, args: &LinkArgs) -> JobResult {
    let point = Point::of_link(args.n);
    let lease = cx.lease();
    if point != Point::MidJob {
        let mut tx = cx.begin().await?;
        effect_and_next(&mut tx, lease, worker, args).await?;
        if point == Point::AfterEffectCommit {
            tx.commit().await?;
        } else {
            killed(args.n, lease.job_id, point);
            std::process::abort(); // the transaction is open
        }
    }
    killed(args.n, lease.job_id, point);
    std::process::abort();
}

fn killed(n: i64, job_id: i64, point: Point) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{MARKER} {n} {job_id} {}", point.name())
        .and_then(|()| out.flush())
        .expect("write marker");
}

/// The child process: a worker on the injected time the parent passed, whose links'
/// first attempts kill it. Runs only when spawned by the process test below.
#[test]
#[ignore = "run as a child process by the chain process test of this file"]
fn chain_child() {
    as_child("chain_child", CHILD_ENV, |url| async move {
        let store = open_store(&url).await.expect("child opens the store");
        let us: i64 = std::env::var(NOW_ENV)
            .expect("injected time")
            .parse()
            .expect("injected time in microseconds");
        let now = chrono::DateTime::from_timestamp_micros(us).expect("a valid time");
        let idem = Idem::from_store(store).with_clock(Arc::new(ManualClock::new(now)));
        let (runs, _) = events();
        let link = Link {
            killed_once: true,
            ..Link::new("child", &runs)
        };
        let _running = start(&idem, config(QUEUE, 1), link);
        std::future::pending::<()>().await;
    });
}

/// Runs a child worker at injected time `now` until it kills itself; returns the link
/// it killed (place, job id, point).
async fn kill_a_child(url: &str, now: idem::Timestamp) -> (i64, i64, Point) {
    let us = now.timestamp_micros().to_string();
    let child = spawn_test_child("chain_child", &[(CHILD_ENV, url), (NOW_ENV, &us)]);
    let out = within(
        60,
        "the child worker kills itself",
        child.wait_with_output(),
    )
    .await
    .expect("child output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let markers: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_once(MARKER).map(|(_, rest)| rest))
        .collect();
    assert!(
        !out.status.success() && markers.len() == 1,
        "the child should be killed inside one link; status {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let fields: Vec<&str> = markers[0].split_whitespace().collect();
    let n = fields[0].parse().unwrap();
    (n, fields[1].parse().unwrap(), Point::of_link(n))
}

/// Rescues the killed child's job, past its lease on `idem`'s clock.
async fn rescue_orphan(idem: &Idem) -> Vec<i64> {
    // On PostgreSQL the killed child's session can hold the job's row lock until the
    // server notices the closed connection, and a rescue skips locked rows; the server
    // sends no signal for that, so the rescue is repeated until it finds the job.
    within(30, "the rescue after the child's session ended", async {
        loop {
            let rescued = idem.rescue().await.unwrap();
            if !rescued.is_empty() {
                return rescued.iter().map(|j| j.id).collect();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// A chain of five links, each killed once mid-job in a real process, completes: each
/// link's effect is made once, and the chain has its five successors in order.
///
/// The chain: the test enqueues link 1; link k's effect transaction enqueues link k + 1,
/// and link 5's enqueues the end job. So "five successors" are links 2 to 5 and the end
/// job, each following its predecessor (`follows_job`), one per link. Every link's
/// first attempt kills its process (a child worker, this test binary): links 1 and 4
/// before their effect transaction, links 2 and 5 after it committed the effect and the
/// successor without completing, link 3 inside it before commit. Each child kills itself
/// once; the parent then moves injected time past the lease, rescues the killed link and
/// starts the next child at that time, which first runs what was rescued (completing
/// it and enqueueing its successor, or finding both done) and dies in the next link.
/// After the fifth kill the parent runs link 5's retry and the end job itself.
async fn a_chain_whose_links_are_each_killed_once_completes_in_order(db: &TestDb) {
    let clock = Arc::new(db_clock(db).await);
    let idem = client(db, Some(clock.clone()));
    create_effect_table(&idem).await;
    let first = idem.enqueue(first_link(LINKS, true)).await.unwrap().job;
    let mut kills = Vec::new();
    for _ in 1..=LINKS {
        let kill = kill_a_child(&db.url, clock.get()).await;
        clock.advance(Duration::from_secs(31));
        assert_eq!(rescue_orphan(&idem).await, [kill.1], "the killed link");
        kills.push(kill);
    }

    let (runs_tx, _runs) = events();
    let (ended_tx, mut ended) = events();
    let mut cfg = config(QUEUE, 2);
    cfg.queues.insert(END_QUEUE.into(), 1);
    let mut w = idem.worker(cfg).unwrap();
    w.register(Link::new("parent", &runs_tx)).unwrap();
    w.register(End { ended: ended_tx }).unwrap();
    let w = w.start();
    let end = within(60, "the end job runs", ended.recv()).await.unwrap();
    within(30, "shutdown", w.shutdown()).await;
    assert!(ended.try_recv().is_err(), "the end job ran once");

    let chain = chain_from(&idem, first.id).await;
    assert_eq!(chain.len() as i64, LINKS + 1, "five links and the end job");
    assert_eq!(chain.last().unwrap().id, end.id);
    let ids = assert_links(&idem, &chain, LINKS).await;
    let places: Vec<i64> = kills.iter().map(|k| k.0).collect();
    assert_eq!(places, [1, 2, 3, 4, 5], "each link killed once, in order");
    let killed_ids: Vec<i64> = kills.iter().map(|k| k.1).collect();
    assert_eq!(killed_ids, ids);
    for (row, (n, _, point)) in effects(&idem).await.iter().zip(&kills) {
        if *point == Point::AfterEffectCommit {
            assert_eq!(
                (row.1, row.2.as_str()),
                (1, "child"),
                "link {n}'s effect was committed by its killed first claim, not repeated"
            );
        } else {
            assert_eq!(row.1, 2, "link {n}'s effect was made by its retry alone");
        }
    }
    for id in ids {
        let outcomes: Vec<_> = idem
            .attempts(id)
            .await
            .unwrap()
            .iter()
            .map(|a| a.outcome)
            .collect();
        assert_eq!(
            outcomes,
            [AttemptOutcome::LeaseExpired, AttemptOutcome::Completed],
            "job {id}"
        );
    }
    assert_eq!(end.attempt, 1);
}

idem_store_tests::store_cases!(
    a_chain_of_five_links_runs_to_the_end_each_effect_once,
    a_link_run_twice_enqueues_one_successor,
    a_stale_link_enqueues_no_successor,
    a_chain_whose_links_are_each_killed_once_completes_in_order,
);
