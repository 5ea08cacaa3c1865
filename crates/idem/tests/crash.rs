//! Worker processes aborted at three points, on both stores. After the lease expires
//! (injected time) the job is rescued and runs again in this process:
//! - mid-job, before any effect: the job completes, nothing is lost;
//! - after the effect transaction committed (without completing the job): the retry finds
//!   the effect key done and does not repeat the effect;
//! - inside the effect transaction, before commit: neither the key nor the effect is
//!   visible, and the retry makes the effect once.
//!
//! The child is this same test binary, run with `--ignored --exact crash_child`, the
//! database URL in `IDEM_CRASH_CHILD_URL` and the crash point in `IDEM_CRASH_POINT`.

mod common;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use idem::{AttemptOutcome, EffectClass, Handler, Idem, Job, JobContext, JobError, JobState};
use idem_store_tests::{TestDb, harness::within, open_store};

const CHILD_ENV: &str = "IDEM_CRASH_CHILD_URL";
const POINT_ENV: &str = "IDEM_CRASH_POINT";
const MARKER: &str = "IDEM_CHILD_RUNNING";

/// Where the child aborts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Point {
    MidJob,
    AfterEffectCommit,
    InsideEffectTx,
}

impl Point {
    fn name(self) -> &'static str {
        match self {
            Point::MidJob => "mid-job",
            Point::AfterEffectCommit => "after-effect-commit",
            Point::InsideEffectTx => "inside-effect-tx",
        }
    }

    fn parse(s: &str) -> Point {
        [
            Point::MidJob,
            Point::AfterEffectCommit,
            Point::InsideEffectTx,
        ]
        .into_iter()
        .find(|p| p.name() == s)
        .unwrap_or_else(|| panic!("unknown crash point {s:?}"))
    }
}

/// Aborts the process at its crash point.
struct AbortAt(Point);

impl Handler for AbortAt {
    const KIND: &'static str = EFFECT_KIND;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let (id, owner) = (
            cx.job().id,
            cx.job().lease_owner.clone().unwrap_or_default(),
        );
        let lease = cx.lease();
        if self.0 != Point::MidJob {
            let mut tx = cx.begin().await?;
            assert!(write_effect(&mut tx, lease, "child").await?);
            if self.0 == Point::AfterEffectCommit {
                tx.commit().await?;
            } else {
                marker(id, &owner);
                std::process::abort(); // the transaction is open
            }
        }
        marker(id, &owner);
        std::process::abort();
    }
}

fn marker(job_id: i64, owner: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{MARKER} {job_id} {owner}")
        .and_then(|()| out.flush())
        .expect("write marker");
}

/// The child process: a worker whose handler aborts at the crash point. Runs only when
/// spawned by the tests below.
#[test]
#[ignore = "run as a child process by the crash tests of this file"]
fn crash_child() {
    as_child("crash_child", CHILD_ENV, |url| async move {
        let store = open_store(&url).await.expect("child opens the store");
        let idem = Idem::from_store(store);
        let point = Point::parse(&std::env::var(POINT_ENV).expect("crash point"));
        let mut w = idem.worker(config("crash", 1)).expect("worker");
        w.register(AbortAt(point)).expect("register");
        let _running = w.start();
        std::future::pending::<()>().await;
    });
}

async fn run_child(url: &str, point: Point) -> String {
    let child = spawn_test_child(
        "crash_child",
        &[(CHILD_ENV, url), (POINT_ENV, point.name())],
    );
    let out = within(120, "the child worker aborts", child.wait_with_output())
        .await
        .expect("child output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        !out.status.success() && stdout.contains(MARKER),
        "the child should abort inside the handler; status {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The child aborts at `point`; returns the job, the child's worker name, and what the
/// store holds before the rescue (effect rows, effect keys).
async fn crash_child_at(db: &TestDb, point: Point) -> (idem::JobRow, Vec<(i64, i64, String)>, i64) {
    let idem = client(db, None);
    create_effect_table(&idem).await;
    let job = idem
        .enqueue(Job::new(EFFECT_KIND, serde_json::json!({})).queue("crash"))
        .await
        .unwrap();
    let stdout = run_child(&db.url, point).await;
    let owner = stdout
        .lines()
        .find_map(|l| l.split_once(MARKER).map(|(_, rest)| rest))
        .and_then(|l| l.split_whitespace().nth(1))
        .expect("marker names the child worker")
        .to_owned();
    let orphan = common::job(&idem, job.id).await;
    assert_eq!(
        orphan.state,
        JobState::Running,
        "the dead worker still holds the lease"
    );
    assert_eq!(orphan.lease_owner.as_deref(), Some(owner.as_str()));
    let keys = idem
        .store()
        .query("SELECT count(*) FROM idem_effect", &[])
        .await
        .unwrap();
    (orphan, effects(&idem).await, keys[0][0].as_i64().unwrap())
}

/// Rescues the job past its lease (injected time) and runs it again here; returns whether
/// the retry found the effect key new.
async fn retry_here(db: &TestDb, job: &idem::JobRow) -> bool {
    let clock = db_clock(db).await;
    clock.advance(Duration::from_secs(31));
    let idem = client(db, Some(Arc::new(clock)));
    // On PostgreSQL the killed child's session can hold the job's row lock until the
    // server notices the closed connection, and a rescue skips locked rows; the server
    // sends no signal for that, so the rescue is repeated until it finds the job.
    let rescued = within(30, "the rescue after the child's session ended", async {
        loop {
            let rescued = idem.rescue().await.unwrap();
            if !rescued.is_empty() {
                return rescued;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(
        rescued.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![job.id]
    );
    let (done, done_rx) = Once::new();
    let mut w = idem.worker(config("crash", 1)).unwrap();
    w.register(WriteEffect {
        worker: "parent",
        done,
    })
    .unwrap();
    let w = w.start();
    let (_, new) = within(30, "the job runs again", done_rx).await.unwrap();
    within(30, "shutdown", w.shutdown()).await;
    let after = common::job(&idem, job.id).await;
    assert_eq!((after.state, after.attempt), (JobState::Completed, 2));
    let history = idem.attempts(job.id).await.unwrap();
    let outcomes: Vec<_> = history.iter().map(|a| a.outcome).collect();
    assert_eq!(
        outcomes,
        vec![AttemptOutcome::LeaseExpired, AttemptOutcome::Completed]
    );
    new
}

async fn worker_killed_mid_job_loses_no_job(db: &TestDb) {
    let (job, before, keys) = crash_child_at(db, Point::MidJob).await;
    assert_eq!((before.len(), keys), (0, 0));
    assert!(retry_here(db, &job).await, "the retry makes the effect");
    let rows = effects(&client(db, None)).await;
    assert_eq!(rows, vec![(job.id, job.fence + 1, "parent".to_owned())]);
}

async fn crash_after_the_effect_commit_is_not_repeated(db: &TestDb) {
    let (job, before, keys) = crash_child_at(db, Point::AfterEffectCommit).await;
    let child_row = vec![(job.id, job.fence, "child".to_owned())];
    assert_eq!(
        (before.clone(), keys),
        (child_row.clone(), 1),
        "the effect committed"
    );
    assert!(
        !retry_here(db, &job).await,
        "the retry finds the effect done"
    );
    assert_eq!(
        effects(&client(db, None)).await,
        child_row,
        "and does not repeat it"
    );
}

async fn crash_inside_the_effect_transaction_leaves_nothing(db: &TestDb) {
    let (job, before, keys) = crash_child_at(db, Point::InsideEffectTx).await;
    assert_eq!(
        (before.len(), keys),
        (0, 0),
        "neither the key nor the effect is visible"
    );
    assert!(retry_here(db, &job).await, "the retry owns the effect");
    let rows = effects(&client(db, None)).await;
    assert_eq!(
        rows,
        vec![(job.id, job.fence + 1, "parent".to_owned())],
        "made once"
    );
}

idem_store_tests::store_cases!(
    worker_killed_mid_job_loses_no_job,
    crash_after_the_effect_commit_is_not_repeated,
    crash_inside_the_effect_transaction_leaves_nothing,
);
