//! A worker process killed mid-job loses no job, on both stores: the child process
//! claims the job and aborts inside the handler; after the lease expires (injected time)
//! the job is rescued, runs again in this process and completes.
//!
//! The child is this same test binary, run with `--ignored --exact crash_child` and the
//! database URL in `IDEM_CRASH_CHILD_URL`.

mod common;

use std::io::Write;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use idem::{AttemptOutcome, EffectClass, Handler, Idem, Job, JobContext, JobError, JobState};
use idem_store_tests::{TestDb, harness::within, open_store};

const CHILD_ENV: &str = "IDEM_CRASH_CHILD_URL";
const MARKER: &str = "IDEM_CHILD_RUNNING";

/// Aborts the process in the middle of the job.
struct AbortMidJob;

impl Handler for AbortMidJob {
    const KIND: &'static str = EFFECT_KIND;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "{MARKER} {} {}",
            cx.job().id,
            cx.job().lease_owner.as_deref().unwrap_or("")
        )
        .and_then(|()| out.flush())
        .expect("write marker");
        std::process::abort();
    }
}

/// The child process: a worker whose handler aborts. Runs only when spawned by
/// `worker_killed_mid_job_loses_no_job`.
#[test]
#[ignore = "run as a child process by worker_killed_mid_job_loses_no_job"]
fn crash_child() {
    let Ok(url) = std::env::var(CHILD_ENV) else {
        eprintln!("crash_child runs only as a child process ({CHILD_ENV} is unset)");
        return;
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async move {
        let store = open_store(&url).await.expect("child opens the store");
        let idem = Idem::from_store(store);
        let mut w = idem.worker(config("crash", 1)).expect("worker");
        w.register(AbortMidJob).expect("register");
        let _running = w.start();
        std::future::pending::<()>().await;
    });
}

async fn run_child(url: &str) -> String {
    let exe = std::env::current_exe().expect("test binary path");
    let child = tokio::process::Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "crash_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the child worker");
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

async fn worker_killed_mid_job_loses_no_job(db: &TestDb) {
    let idem = client(db, None);
    create_effect_table(&idem).await;
    let job = idem
        .enqueue(Job::new(EFFECT_KIND, serde_json::json!({})).queue("crash"))
        .await
        .unwrap();

    let stdout = run_child(&db.url).await;
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

    // Past the lease, on the injected clock.
    let clock = db_clock(db).await;
    clock.advance(Duration::from_secs(31));
    let idem = client(db, Some(Arc::new(clock)));
    let rescued = idem.rescue().await.unwrap();
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
    let fence = within(30, "the job runs again", done_rx).await.unwrap();
    within(30, "shutdown", w.shutdown()).await;

    let after = common::job(&idem, job.id).await;
    assert_eq!(
        (after.state, after.attempt, after.fence),
        (JobState::Completed, 2, fence)
    );
    assert_eq!(
        effects(&idem).await,
        vec![(job.id, fence, "parent".to_owned())]
    );
    let history = idem.attempts(job.id).await.unwrap();
    let outcomes: Vec<_> = history.iter().map(|a| a.outcome).collect();
    assert_eq!(
        outcomes,
        vec![AttemptOutcome::LeaseExpired, AttemptOutcome::Completed]
    );
}

idem_store_tests::store_cases!(worker_killed_mid_job_loses_no_job);
