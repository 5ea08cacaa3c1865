//! A worker process killed after its `http` call reached a keyed remote and before it
//! recorded the outcome, on both stores. After the leases expire (injected time) the job
//! runs again in this process: the intent is taken over and the call is sent with the
//! same `Idempotency-Key`, so the remote applies it once and replays its answer.
//!
//! The child is this same test binary, run with `--ignored --exact remote_crash_child`
//! and the database URL in `IDEM_REMOTE_CRASH_URL`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::remote::*;
use common::*;
use idem::builtin::Http;
use idem::{Idem, IntentState, Job, JobState};
use idem_mock_remote::{Fault, MockRemote, Mode};
use idem_store_tests::{TestDb, harness::within, open_store};

const CHILD_ENV: &str = "IDEM_REMOTE_CRASH_URL";

/// The `http` kind of both processes, with the tests' long intent lease.
fn http() -> Http {
    http_kind(Duration::from_secs(60))
}

/// The child process: a worker running the `http` kind, until it is killed. Runs only
/// when spawned by the test below.
#[test]
#[ignore = "run as a child process by the test of this file"]
fn remote_crash_child() {
    as_child("remote_crash_child", CHILD_ENV, |url| async move {
        let store = open_store(&url).await.expect("child opens the store");
        let mut w = Idem::from_store(store)
            .worker(config("out", 1))
            .expect("worker");
        w.register(http()).expect("register");
        let _running = w.start();
        std::future::pending::<()>().await;
    });
}

async fn a_worker_killed_after_its_call_is_retried_with_the_same_key(db: &TestDb) {
    let remote = MockRemote::start(Mode::Keyed).expect("mock");
    remote.inject(Fault::ApplyThenHang);
    let idem = client(db, None);
    let args = serde_json::json!({
        "url": format!("{}/effects", remote.url()),
        "body": {"order": 3, "amount": 100},
    });
    let job = idem
        .enqueue(Job::new("http", args).queue("out").enqueue_key("pay-3"))
        .await
        .unwrap()
        .job;
    let mut child = spawn_test_child("remote_crash_child", &[(CHILD_ENV, &db.url)]);
    within(
        60,
        "the child's call is applied",
        remote.wait_for_applied(1),
    )
    .await;
    child.kill().await.expect("kill the child");
    let key = "http:key:out:pay-3";
    let held = idem
        .store()
        .intent_get(key.into())
        .await
        .unwrap()
        .expect("intent");
    assert_eq!(
        held.state,
        IntentState::InProgress,
        "the dead holder's intent"
    );

    let clock = db_clock(db).await;
    clock.advance(LEASE + Duration::from_secs(1));
    let idem = client(db, Some(Arc::new(clock)));
    // The killed child's PostgreSQL session may hold a row lock until the server notices
    // the closed connection, and a rescue skips locked rows; nothing signals that, so
    // the rescue is repeated until it finds the job.
    within(30, "the rescue", async {
        while idem.rescue().await.unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let mut w = idem.worker(config("out", 1)).unwrap();
    w.register(http()).unwrap();
    let w = w.start();
    let done = wait_state(&idem, job.id, JobState::Completed).await;
    within(30, "shutdown", w.shutdown()).await;
    assert_eq!(done.attempt, 2);
    let log = remote.log();
    let keys: Vec<_> = log.iter().map(|e| e.key.clone()).collect();
    assert_eq!(
        keys,
        vec![Some(key.to_owned()); 2],
        "the same key both times"
    );
    assert_eq!(remote.applied_for(key), 1, "applied once");
    assert!(log[1].replayed, "the remote replayed its answer: {log:?}");
    let row = idem
        .store()
        .intent_get(key.into())
        .await
        .unwrap()
        .expect("intent");
    assert_eq!((row.state, row.attempt), (IntentState::Completed, 2));
    assert_eq!(row.remote_refs, remote.copies(key));
}

idem_store_tests::store_cases!(a_worker_killed_after_its_call_is_retried_with_the_same_key);
