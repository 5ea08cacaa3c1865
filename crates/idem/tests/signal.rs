//! `WorkerHandle::shutdown_on_signal` in a real process, on both stores: a worker process
//! sent SIGTERM or SIGINT while a job runs lets the job finish, writes its completion and
//! exits cleanly with its final report.
//!
//! The child is this same test binary, run with `--ignored --exact signal_child` and the
//! database URL in `IDEM_SIGNAL_CHILD_URL`. Once its job runs and the first poll of
//! `shutdown_on_signal` has installed the worker's signal handlers, it prints
//! `IDEM_CHILD_READY`; the parent then sends the signal with `kill`. The child's
//! handler hears the same signal and returns, so a worker that did not shut down would
//! leave the child running until the parent's deadline.
#![cfg(unix)]

mod common;

use common::*;
use idem::{EffectClass, Handler, Idem, Job, JobContext, JobError, JobState, WorkerReport};
use idem_store_tests::{TestDb, harness::within, open_store};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::ChildStdout;
use tokio::signal::unix::{SignalKind, signal};

const CHILD_ENV: &str = "IDEM_SIGNAL_CHILD_URL";
const READY: &str = "IDEM_CHILD_READY";
const REPORT: &str = "IDEM_CHILD_REPORT";
const QUEUE: &str = "signal";

/// Runs until the process receives SIGTERM or SIGINT, then completes.
struct UntilSignal {
    started: Once<()>,
}

impl Handler for UntilSignal {
    const KIND: &'static str = "until-signal";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, _: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let mut term = signal(SignalKind::terminate()).expect("listen for SIGTERM");
        let mut int = signal(SignalKind::interrupt()).expect("listen for SIGINT");
        self.started.fire(()).await;
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
        Ok(())
    }
}

/// The child process: a worker that runs until a stop signal, then prints its report.
/// Runs only when spawned by the tests below.
#[test]
#[ignore = "run as a child process by the signal tests of this file"]
fn signal_child() {
    as_child("signal_child", CHILD_ENV, |url| async move {
        let store = open_store(&url).await.expect("child opens the store");
        let (started, started_rx) = Once::new();
        let mut w = Idem::from_store(store)
            .worker(config(QUEUE, 1))
            .expect("worker");
        w.register(UntilSignal { started }).expect("register");
        let running = w.start();
        within(60, "the job starts", started_rx)
            .await
            .expect("job started");
        let mut stopping = std::pin::pin!(running.shutdown_on_signal());
        // The first poll installs the worker's signal handlers.
        assert!(futures::poll!(stopping.as_mut()).is_pending());
        println!("{READY}");
        let report = stopping.await;
        let json = serde_json::to_string(&report).expect("report as JSON");
        println!("{REPORT} {json}");
    });
}

/// The rest of the first line after `marker`; `None` if the output ends first.
async fn line_after(lines: &mut Lines<BufReader<ChildStdout>>, marker: &str) -> Option<String> {
    while let Some(line) = lines.next_line().await.expect("read the child's output") {
        if let Some((_, rest)) = line.split_once(marker) {
            return Some(rest.trim().to_owned());
        }
    }
    None
}

/// Sends `signal` (`TERM`, `INT`) to the process `pid`.
async fn send(signal: &str, pid: u32) {
    let status = tokio::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .await
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid} failed: {status}");
}

/// Starts a child worker on a job that runs until a signal, sends it `signal` and
/// returns the child's final report.
async fn child_stopped_by(db: &TestDb, signal: &str) -> WorkerReport {
    let mut child = spawn_test_child("signal_child", &[(CHILD_ENV, &db.url)]);
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let ready = within(120, "the child's job runs", line_after(&mut stdout, READY)).await;
    if ready.is_none() {
        let out = child.wait_with_output().await.expect("child output");
        let stderr = String::from_utf8_lossy(&out.stderr);
        panic!(
            "the child ended before it was ready: {}\n{stderr}",
            out.status
        );
    }
    send(signal, child.id().expect("the child runs")).await;
    let out = within(120, "the child shuts down", child.wait_with_output())
        .await
        .expect("child output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", out.status);
    let report = within(30, "the child's report", line_after(&mut stdout, REPORT))
        .await
        .expect("the child printed its report");
    serde_json::from_str(&report).expect("report JSON")
}

/// The job running when the signal arrives finishes and is completed; nothing else ran.
async fn stops_gracefully_on(db: &TestDb, signal: &str) {
    let idem = client(db, None);
    let job = Job::new(UntilSignal::KIND, serde_json::json!({})).queue(QUEUE);
    let job = idem.enqueue(job).await.unwrap();
    let report = child_stopped_by(db, signal).await;
    assert_eq!(
        (report.claimed, report.completed, report.retried),
        (1, 1, 0),
        "{report:?}"
    );
    assert_eq!(common::job(&idem, job.id).await.state, JobState::Completed);
}

async fn a_worker_process_stops_gracefully_on_sigterm(db: &TestDb) {
    stops_gracefully_on(db, "TERM").await;
}

async fn a_worker_process_stops_gracefully_on_sigint(db: &TestDb) {
    stops_gracefully_on(db, "INT").await;
}

idem_store_tests::store_cases!(
    a_worker_process_stops_gracefully_on_sigterm,
    a_worker_process_stops_gracefully_on_sigint,
);
