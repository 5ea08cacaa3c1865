//! Wake-ups across processes: a worker on a store of its own, polling only once an hour,
//! starts a job within moments of another client enqueueing it (PostgreSQL's
//! LISTEN/NOTIFY; SQLite's wake-up sockets beside the database file), and once it shut
//! down and its store closed, nothing of the channel is left on disk.
//! `crates/idem-cli/tests/wake.rs` does the same with two real processes.

mod common;

use std::time::Duration;

use common::*;
use idem::{EffectClass, Handler, Idem, Job, JobContext, JobError, WorkerConfig};
use idem_store_tests::harness::{run_case, within};
use idem_store_tests::{Backend, TestDb, open_store};

struct Started {
    done: Once<i64>,
}

impl Handler for Started {
    const KIND: &'static str = "wake";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        self.done.fire(cx.job().id).await;
        Ok(())
    }
}

/// Starts a worker of `consumer` with `cfg`, waits until it is ready, enqueues one job
/// with `producer` and waits for the job to start (`how`), then shuts the worker down.
async fn one_job_runs(consumer: &Idem, cfg: WorkerConfig, producer: &Idem, how: &str) {
    let (done, done_rx) = Once::new();
    let mut w = consumer.worker(cfg).unwrap();
    w.register(Started { done }).unwrap();
    let w = w.start();
    within(30, "the worker is ready", w.ready()).await;
    let job = producer
        .enqueue(Job::new("wake", serde_json::json!({})).queue("wake"))
        .await
        .unwrap();
    let started = within(30, how, done_rx).await;
    assert_eq!(started.unwrap(), job.id);
    within(30, "shutdown", w.shutdown()).await;
}

async fn another_process_wakes_the_worker(db: &TestDb) {
    let producer = client(db, None);
    let worker_store = open_store(&db.url).await.expect("second store");
    assert!(worker_store.has_channel());
    let consumer = Idem::from_store(worker_store.clone());
    let mut cfg = config("wake", 1);
    cfg.poll_interval = Duration::from_secs(3600);
    one_job_runs(
        &consumer,
        cfg,
        &producer,
        "the announcement wakes the worker",
    )
    .await;
    worker_store.close().await;
    if let Some(file) = db.url.strip_prefix("sqlite://") {
        let dir = format!("{file}.wake");
        assert!(!std::path::Path::new(&dir).exists(), "{dir} left behind");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_another_process_wakes_the_worker() {
    run_case(
        Backend::Postgres,
        "another_process_wakes_the_worker",
        another_process_wakes_the_worker,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_another_process_wakes_the_worker() {
    run_case(
        Backend::Sqlite,
        "another_process_wakes_the_worker",
        another_process_wakes_the_worker,
    )
    .await;
}

/// A symlink planted as SQLite's wake-up directory after the store opened: the worker
/// does not follow it, is ready all the same (it polls), and still runs the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_planted_wake_directory_leaves_the_worker_ready_and_polling() {
    let db = TestDb::sqlite().await;
    let file = db.url.strip_prefix("sqlite://").expect("an SQLite URL");
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), format!("{file}.wake")).unwrap();
    let idem = client(&db, None);
    one_job_runs(&idem, config("wake", 1), &idem, "the job starts").await;
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    db.cleanup().await;
}
