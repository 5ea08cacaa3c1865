//! Several worker processes on one SQLite file, as a web application and a few workers
//! share the embedded default: four real processes (this test binary, run as children
//! with `--ignored --exact shared_file_worker`), each `Idem` over the file and a worker
//! of 8 slots with a 1.5 s lease and the default heartbeat and rescue interval, and a
//! continuous feed of short fenced jobs (effect key, effect row, completion in one
//! transaction). No fault is injected, so no job may lose its lease, and the processes
//! take turns on the file's write lock fairly enough that each does its share.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use idem::{Idem, Job, SqlValue, WorkerConfig};
use idem_store_tests::{TestDb, harness::within, open_store};
use tokio::io::{AsyncBufReadExt, BufReader};

const CHILD_ENV: &str = "IDEM_SHARED_FILE_URL";
const NAME_ENV: &str = "IDEM_SHARED_FILE_WORKER";
const QUEUE: &str = "shared";
const READY: &str = "IDEM_WORKER_READY";
const PROCESSES: usize = 4;
const SLOTS: usize = 8;
const LEASE: Duration = Duration::from_millis(1500);
/// How long the feed goes on, and the backlog it keeps waiting (jobs enqueued whenever
/// fewer wait), so that every process always finds work.
const FEED_FOR: Duration = Duration::from_secs(6);
const BACKLOG: i64 = 200;

/// The child process: one worker on the shared file until its stdin closes, then a
/// graceful shutdown.
#[test]
#[ignore = "run as a child process by the tests of this file"]
fn shared_file_worker() {
    as_child("shared_file_worker", CHILD_ENV, |url| async move {
        let worker: &'static str = std::env::var(NAME_ENV).expect("worker name").leak();
        let idem = Idem::from_store(open_store(&url).await.expect("child opens the store"));
        let config = WorkerConfig::default()
            .only_queue(QUEUE, SLOTS)
            .lease(LEASE);
        let mut w = idem.worker(config).expect("worker");
        // A short job: its effect row (under its effect key), naming this process, and its
        // completion in one fenced transaction.
        let done = Once::new().0;
        w.register(WriteEffect { worker, done }).expect("register");
        let running = w.start();
        println!("{READY}");
        let _ = tokio::task::spawn_blocking(|| {
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new())
        })
        .await;
        running.shutdown().await;
    });
}

/// One number from a query.
async fn count(idem: &Idem, sql: &str) -> i64 {
    let rows = idem.store().query(sql, &[]).await.expect("count");
    match rows.first().map(Vec::as_slice) {
        Some([SqlValue::Int(n)]) => *n,
        other => panic!("{sql}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_worker_processes_share_one_sqlite_file_fairly_and_keep_their_leases() {
    let db = TestDb::sqlite().await;
    let idem = client(&db, None);
    create_effect_table(&idem).await;

    let mut children = Vec::new();
    for i in 1..=PROCESSES {
        let name = format!("w{i}");
        let mut child = spawn_test_child(
            "shared_file_worker",
            &[(CHILD_ENV, db.url.as_str()), (NAME_ENV, name.as_str())],
        );
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        within(60, "a worker process starts", async {
            while let Some(line) = lines.next_line().await.expect("child stdout") {
                if line.contains(READY) {
                    return;
                }
            }
            panic!("worker {name} ended before it was ready");
        })
        .await;
        // The rest of its output is read, so that its last lines find the pipe open.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        children.push((name, child));
    }

    let waiting =
        format!("SELECT count(*) FROM idem_job WHERE queue = '{QUEUE}' AND state = 'available'");
    let started = tokio::time::Instant::now();
    let mut fed = 0;
    while started.elapsed() < FEED_FOR {
        if count(&idem, &waiting).await < BACKLOG {
            let jobs = (0..BACKLOG / 2)
                .map(|_| Job::new(EFFECT_KIND, serde_json::json!({})).queue(QUEUE))
                .collect();
            fed += idem.enqueue_many(jobs).await.expect("enqueue").len() as i64;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let finished =
        format!("SELECT count(*) FROM idem_job WHERE queue = '{QUEUE}' AND state = 'completed'");
    within(120, "every job completes", async {
        while count(&idem, &finished).await < fed {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    for (name, mut child) in children {
        drop(child.stdin.take());
        let out = within(60, "a worker process stops", child.wait_with_output()).await;
        let out = out.expect("wait");
        assert!(
            out.status.success(),
            "worker {name} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let lost = format!("SELECT count(*) FROM idem_job WHERE queue = '{QUEUE}' AND attempt > 1");
    assert_eq!(count(&idem, &lost).await, 0, "jobs that lost their lease");
    let effects = effects(&idem).await;
    assert_eq!(effects.len() as i64, fed, "one effect per job");
    let mut share: BTreeMap<String, i64> = BTreeMap::new();
    for (_, _, worker) in &effects {
        *share.entry(worker.clone()).or_default() += 1;
    }
    let fair = fed as f64 / PROCESSES as f64;
    eprintln!("{fed} jobs in {FEED_FOR:?}; per process {share:?}, a fair share {fair:.0}");
    for i in 1..=PROCESSES {
        let done = share.get(&format!("w{i}")).copied().unwrap_or(0) as f64;
        assert!(
            (done - fair).abs() <= 0.25 * fair,
            "w{i} did {done} jobs of {fed}, a fair share is {fair:.0} (±25%): {share:?}"
        );
    }
    db.cleanup().await;
}
