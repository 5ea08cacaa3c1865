//! Wake-ups across processes: a worker on a store of its own, polling only once an hour,
//! starts a job within moments of another client enqueueing it (PostgreSQL's
//! LISTEN/NOTIFY; SQLite's wake-up sockets beside the database file), and once it shut
//! down and its store closed, nothing of the channel is left on disk.
//! `crates/idem-cli/tests/wake.rs` does the same with two real processes.

mod common;

use std::time::Duration;

use common::*;
use idem::{EffectClass, Handler, Idem, Job, JobContext, JobError};
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

async fn another_process_wakes_the_worker(db: &TestDb) {
    let producer = client(db, None);
    let worker_store = open_store(&db.url).await.expect("second store");
    assert!(worker_store.has_channel());
    let consumer = Idem::from_store(worker_store.clone());
    let mut cfg = config("wake", 1);
    cfg.poll_interval = Duration::from_secs(3600);
    let (done, done_rx) = Once::new();
    let mut w = consumer.worker(cfg).unwrap();
    w.register(Started { done }).unwrap();
    let w = w.start();
    within(30, "the worker listens", w.ready()).await;
    let job = producer
        .enqueue(Job::new("wake", serde_json::json!({})).queue("wake"))
        .await
        .unwrap();
    let started = within(30, "the announcement wakes the worker", done_rx).await;
    assert_eq!(started.unwrap(), job.id);
    within(30, "shutdown", w.shutdown()).await;
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
