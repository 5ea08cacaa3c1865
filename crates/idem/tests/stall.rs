//! PostgreSQL liveness with a real stopped process: a worker paused (SIGSTOP) inside its
//! effect transaction holds the job's row. A cancel of the job gives up after the
//! operator lock timeout (5 s) with a `Busy` error that says what holds the job, instead
//! of hanging; the server ends the stalled session once it has sat idle in its
//! transaction for the worker's lease (8 s here), which releases the row; the rescuer
//! then takes the job back, and the cancel goes through. Without the session's idle
//! timeout the rescuer would skip the locked row for ever.
//!
//! The child is this same test binary, run with `--ignored --exact stall_child` and the
//! database URL in `IDEM_STALL_CHILD_URL`. Its handler opens the effect transaction,
//! prints `IDEM_CHILD_IN_TX` and waits for ever; the parent then stops it with
//! `kill -STOP`. SQLite has no sessions to time out (a paused writer there is the
//! multi-process question of the SQLite issue), so this runs on PostgreSQL only.
#![cfg(unix)]

mod common;

use std::time::Duration;

use common::*;
use idem::{EffectClass, Handler, Idem, Job, JobContext, JobError, JobState, StoreError};
use idem_store_tests::{TestDb, harness::within, open_store};
use tokio::io::{AsyncBufReadExt, BufReader};

const CHILD_ENV: &str = "IDEM_STALL_CHILD_URL";
const IN_TX: &str = "IDEM_CHILD_IN_TX";
const QUEUE: &str = "stall";
/// The child worker's lease, and so its effect transaction's idle timeout: longer than
/// the operator lock timeout (5 s), so a cancel gives up before the server ends the
/// stalled session.
const LEASE: Duration = Duration::from_secs(8);

/// Opens its effect transaction, says so, and never goes on.
struct StallsInTx;

impl Handler for StallsInTx {
    const KIND: &'static str = "stalls-in-tx";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let job_id = cx.job().id;
        let _tx = cx.begin().await?;
        println!("{IN_TX} {job_id}");
        std::future::pending::<()>().await;
        Ok(())
    }
}

/// The child process: a worker whose job stalls inside its effect transaction. Runs
/// only when spawned by the test below.
#[test]
#[ignore = "run as a child process by the stall test of this file"]
fn stall_child() {
    as_child("stall_child", CHILD_ENV, |url| async move {
        let store = open_store(&url).await.expect("child opens the store");
        let mut w = Idem::from_store(store)
            .worker(config(QUEUE, 1).lease(LEASE))
            .expect("worker");
        w.register(StallsInTx).expect("register");
        let _running = w.start();
        std::future::pending::<()>().await;
    });
}

/// Sends `signal` (`STOP`, `KILL`) to the process `pid`.
async fn send(signal: &str, pid: u32) {
    let status = tokio::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .await
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid} failed: {status}");
}

/// Rescues until the job comes back: the server must first end the stalled session (its
/// idle timeout) and the lease must expire, both on the server's clock. Polls the
/// store, a bounded number of times a second, under a deadlock guard.
async fn rescue_until(idem: &Idem, job_id: i64) {
    loop {
        let rescued = idem.rescue().await.expect("rescue");
        if rescued.iter().any(|j| j.id == job_id) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn a_worker_paused_in_its_transaction_loses_its_session(db: &TestDb) {
    let idem = client(db, None);
    let job = Job::new(StallsInTx::KIND, serde_json::json!({})).queue(QUEUE);
    let job = idem.enqueue(job).await.unwrap();
    let mut child = spawn_test_child("stall_child", &[(CHILD_ENV, &db.url)]);
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let in_tx = async {
        while let Some(line) = stdout.next_line().await.expect("read the child") {
            // The harness prints `test stall_child ... ` with no newline before it.
            if let Some((_, rest)) = line.split_once(IN_TX) {
                return Some(rest.trim().to_owned());
            }
        }
        None
    };
    let in_tx = within(120, "the child's effect transaction opens", in_tx).await;
    assert_eq!(in_tx, Some(job.id.to_string()), "the child's handler ran");
    send("STOP", child.id().expect("the child runs")).await;

    let held = within(60, "a cancel of the held job", idem.cancel(job.id)).await;
    match held {
        Err(idem::IdemError::Store(StoreError::Busy(msg))) => {
            assert!(msg.contains("effect transaction"), "{msg}")
        }
        other => panic!("a cancel of a job a paused worker holds: {other:?}"),
    }

    within(
        60,
        "the rescue of the stalled job",
        rescue_until(&idem, job.id),
    )
    .await;
    let cancelled = within(30, "the cancel after the rescue", idem.cancel(job.id)).await;
    assert_eq!(cancelled.expect("cancel").state, JobState::Cancelled);
    send("KILL", child.id().expect("the child still runs")).await;
    let _ = child.wait().await;
}

idem_store_tests::postgres_cases!(a_worker_paused_in_its_transaction_loses_its_session);
