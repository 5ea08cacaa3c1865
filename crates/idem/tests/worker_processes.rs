//! Several worker processes on one store: real processes (this test binary, run as
//! children with `--ignored --exact shared_store_worker`), each `Idem` over the store and
//! a worker with a 1.5 s lease, and a continuous feed of short fenced jobs (effect key,
//! effect row and completion in one transaction) from this process.
//!
//! - Four processes of 8 slots on one SQLite file (the embedded default shared by a web
//!   application and a few workers), and eight of 4 slots on one PostgreSQL schema
//!   (workers on many hosts): no job loses its lease, every job's effect is written once
//!   under its last fence, and each process does its share of the work (within ±25%).
//! - One process stopped (SIGSTOP) past its lease on SQLite, at a moment it does not
//!   hold the write lock: the others rescue its jobs and complete them ahead of the
//!   younger jobs waiting then; once it resumes, its stale writes are refused; no job is
//!   lost or written twice, and completions never pause for as long as the busy timeout.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use common::*;
use idem::{Idem, Job, SqlValue, WorkerConfig, WorkerReport};
use idem_store_tests::{TestDb, harness::within, open_store};
use tokio::sync::watch;
use tokio::task::JoinHandle;

const CHILD_ENV: &str = "IDEM_SHARED_STORE_URL";
const NAME_ENV: &str = "IDEM_SHARED_STORE_WORKER";
const SLOTS_ENV: &str = "IDEM_SHARED_STORE_SLOTS";
const RESCUE_ENV: &str = "IDEM_SHARED_STORE_RESCUE_MS";
const QUEUE: &str = "shared";
const READY: &str = "IDEM_WORKER_READY";
const REPORT: &str = "IDEM_WORKER_REPORT";
const LEASE: Duration = Duration::from_millis(1500);
/// The backlog the feed keeps waiting (jobs are enqueued whenever fewer wait), so that
/// every process always finds work.
const BACKLOG: i64 = 200;
/// The store's default busy timeout: the longest any write may be held up.
const BUSY_TIMEOUT: Duration = idem_sqlite::DEFAULT_BUSY_TIMEOUT;

/// The child process: one worker named by the environment on the shared store until its
/// stdin closes, then a graceful shutdown and its report on stdout.
#[test]
#[ignore = "run as a child process by the tests of this file"]
fn shared_store_worker() {
    as_child("shared_store_worker", CHILD_ENV, |url| async move {
        let worker: &'static str = std::env::var(NAME_ENV).expect("worker name").leak();
        let slots: usize = std::env::var(SLOTS_ENV)
            .expect("slots")
            .parse()
            .expect("slots");
        let idem = Idem::from_store(child_store(&url, slots).await);
        let mut config = WorkerConfig::default()
            .only_queue(QUEUE, slots)
            .lease(LEASE);
        config.name = Some(worker.to_owned());
        if let Ok(ms) = std::env::var(RESCUE_ENV) {
            config.rescue_interval = Duration::from_millis(ms.parse().expect("rescue ms"));
        }
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
        let report = running.shutdown().await;
        println!(
            "{REPORT} {}",
            serde_json::to_string(&report).expect("report")
        );
    });
}

/// The child's store: on PostgreSQL a pool sized for its worker (its slots and its own
/// duties, as `idem worker` sizes it), so that eight processes fit in the server's
/// default 100 connections; the test harness's larger pool would take them all.
async fn child_store(url: &str, slots: usize) -> std::sync::Arc<dyn idem_store::Store> {
    if !url.starts_with("postgres") {
        return open_store(url).await.expect("child opens the store");
    }
    let options = idem_postgres::PgOptions {
        max_connections: u32::try_from(slots).expect("slots") + idem::WORKER_CONNECTIONS,
        ..idem_postgres::PgOptions::default()
    };
    let store = idem_postgres::PgStore::connect(url, options).await;
    std::sync::Arc::new(store.expect("child opens the store"))
}

/// The worker processes, each with the task reading its stdout.
struct Fleet {
    children: Vec<(
        String,
        tokio::process::Child,
        JoinHandle<Option<WorkerReport>>,
    )>,
}

impl Fleet {
    /// Starts `processes` workers `w1`… of `slots` slots each on `db` and waits until
    /// each is ready; `rescue_ms` sets their rescue interval (default: the library's).
    async fn start(db: &TestDb, processes: usize, slots: usize, rescue_ms: Option<u64>) -> Fleet {
        let rescue = rescue_ms.map(|ms| ms.to_string());
        let slots = slots.to_string();
        let mut children = Vec::new();
        for i in 1..=processes {
            let name = format!("w{i}");
            let mut env = vec![
                (CHILD_ENV, db.url.as_str()),
                (NAME_ENV, name.as_str()),
                (SLOTS_ENV, slots.as_str()),
            ];
            if let Some(ms) = &rescue {
                env.push((RESCUE_ENV, ms.as_str()));
            }
            let mut child = spawn_test_child("shared_store_worker", &env);
            let mut lines = until_ready(&mut child, &name, READY).await;
            // The rest of its output is read (so its last lines find the pipe open), up
            // to its report.
            let report = tokio::spawn(async move {
                let mut report = None;
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some((_, json)) = line.split_once(REPORT) {
                        report = Some(serde_json::from_str(json.trim()).expect("report"));
                    }
                }
                report
            });
            children.push((name, child, report));
        }
        Fleet { children }
    }

    fn pid(&self, name: &str) -> u32 {
        let (_, child, _) = self.children.iter().find(|(n, ..)| n == name).expect(name);
        child.id().expect("running")
    }

    /// Stops every worker gracefully; returns their reports by name.
    async fn stop(self) -> BTreeMap<String, WorkerReport> {
        let mut reports = BTreeMap::new();
        for (name, mut child, report) in self.children {
            drop(child.stdin.take());
            let out = within(60, "a worker process stops", child.wait_with_output()).await;
            let out = out.expect("wait");
            assert!(
                out.status.success(),
                "worker {name} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let report = report.await.expect("reader").expect("the worker's report");
            reports.insert(name, report);
        }
        reports
    }
}

/// Feeds the queue until `stop` turns true, keeping [`BACKLOG`] jobs waiting; returns
/// the task and the count of jobs enqueued so far.
fn feed(idem: &Idem, mut stop: watch::Receiver<bool>) -> (JoinHandle<()>, Arc<AtomicI64>) {
    let fed = Arc::new(AtomicI64::new(0));
    let (idem, counted) = (idem.clone(), fed.clone());
    let waiting =
        format!("SELECT count(*) FROM idem_job WHERE queue = '{QUEUE}' AND state = 'available'");
    let task = tokio::spawn(async move {
        while !*stop.borrow_and_update() {
            if count(&idem, &waiting).await < BACKLOG {
                let jobs = (0..BACKLOG / 2)
                    .map(|_| Job::new(EFFECT_KIND, serde_json::json!({})).queue(QUEUE))
                    .collect();
                let n = idem.enqueue_many(jobs).await.expect("enqueue").len();
                counted.fetch_add(n as i64, Ordering::SeqCst);
            }
            let _ = tokio::time::timeout(Duration::from_millis(5), stop.changed()).await;
        }
    });
    (task, fed)
}

/// Waits until every one of `fed` jobs has completed.
async fn all_completed(idem: &Idem, fed: i64) {
    let finished =
        format!("SELECT count(*) FROM idem_job WHERE queue = '{QUEUE}' AND state = 'completed'");
    within(120, "every job completes", async {
        while count(idem, &finished).await < fed {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// One number from a query.
async fn count(idem: &Idem, sql: &str) -> i64 {
    let rows = idem.store().query(sql, &[]).await.expect("count");
    match rows.first().map(Vec::as_slice) {
        Some([SqlValue::Int(n)]) => *n,
        other => panic!("{sql}: {other:?}"),
    }
}

/// Each job's effect written once, under the job's last fence; returns the count per
/// worker.
async fn effects_once(idem: &Idem, fed: i64) -> BTreeMap<String, i64> {
    let effects = effects(idem).await;
    assert_eq!(effects.len() as i64, fed, "one effect per job");
    let stale = "SELECT count(*) FROM test_effect e JOIN idem_job j ON j.id = e.job_id \
                 WHERE e.fence <> j.fence";
    assert_eq!(count(idem, stale).await, 0, "effects under a stale fence");
    let mut share = BTreeMap::new();
    for (_, _, worker) in &effects {
        *share.entry(worker.clone()).or_default() += 1;
    }
    share
}

async fn signal(pid: u32, signal: &str) {
    let status = tokio::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .await
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid} failed: {status}");
}

/// Waits until process `pid` has stopped: SIGSTOP lands after kill(2) returns, and a
/// process not stopped yet may still take the write lock after a probe found it free.
async fn until_stopped(pid: u32) {
    let stat = format!("/proc/{pid}/stat");
    within(10, "the process stops", async {
        loop {
            let text = std::fs::read_to_string(&stat).expect("the process's stat");
            // The state follows the command name, which is in parentheses.
            let (_, rest) = text.rsplit_once(')').expect("stat format");
            if matches!(rest.trim_start().chars().next(), Some('T' | 't')) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
}

/// Whether another connection can take the file's write lock within `wait`.
async fn write_lock_free(db: &TestDb, wait: Duration) -> bool {
    let path = db.url.trim_start_matches("sqlite://").to_owned();
    tokio::task::spawn_blocking(move || {
        let c = idem_sqlite::rusqlite::Connection::open(path).expect("open");
        c.busy_timeout(wait).expect("busy timeout");
        let free = c.execute_batch("BEGIN IMMEDIATE").is_ok();
        if free {
            c.execute_batch("ROLLBACK").expect("rollback");
        }
        free
    })
    .await
    .expect("lock check")
}

/// `processes` workers of `slots` slots on `db`, fed for a few seconds: no job loses
/// its lease (when `leases_kept`), each effect is written once under its job's last
/// fence, and each process does within ±25% of a fair share.
async fn fair_shares(db: TestDb, processes: usize, slots: usize, leases_kept: bool) {
    let idem = client(&db, None);
    create_effect_table(&idem).await;
    let fleet = Fleet::start(&db, processes, slots, None).await;

    let (stop_feed, stopped) = watch::channel(false);
    let (feeding, fed) = feed(&idem, stopped);
    let feed_for = Duration::from_secs(6);
    tokio::time::sleep(feed_for).await;
    stop_feed.send(true).expect("stop the feed");
    feeding.await.expect("feed");
    let fed = fed.load(Ordering::SeqCst);
    all_completed(&idem, fed).await;
    fleet.stop().await;

    let lost = format!("SELECT count(*) FROM idem_job WHERE queue = '{QUEUE}' AND attempt > 1");
    let lost = count(&idem, &lost).await;
    if leases_kept {
        assert_eq!(lost, 0, "jobs that lost their lease");
    }
    let share = effects_once(&idem, fed).await;
    let fair = fed as f64 / processes as f64;
    eprintln!(
        "{fed} jobs in {feed_for:?}, {lost} run again after a lost lease; per process \
         {share:?}, a fair share {fair:.0}"
    );
    for i in 1..=processes {
        let done = share.get(&format!("w{i}")).copied().unwrap_or(0) as f64;
        assert!(
            (done - fair).abs() <= 0.25 * fair,
            "w{i} did {done} jobs of {fed}, a fair share is {fair:.0} (±25%): {share:?}"
        );
    }
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_worker_processes_share_one_sqlite_file_fairly_and_keep_their_leases() {
    fair_shares(TestDb::sqlite().await, 4, 8, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_worker_processes_share_one_postgresql_fairly_and_keep_their_leases() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    // Eight processes and the server on two cores: a heartbeat may come later than a
    // 1.5 s lease; a job run again then is still written once, which is checked.
    fair_shares(db, 8, 4, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_process_s_jobs_are_rescued_ahead_of_younger_ones_and_its_writes_refused() {
    let db = TestDb::sqlite().await;
    let idem = client(&db, None);
    create_effect_table(&idem).await;
    let fleet = Fleet::start(&db, 4, 8, Some(500)).await;
    let (stop_feed, stopped) = watch::channel(false);
    let (feeding, fed) = feed(&idem, stopped);
    let running_w4 = format!(
        "SELECT count(*) FROM idem_job WHERE queue = '{QUEUE}' AND state = 'running' \
         AND lease_owner = 'w4'"
    );
    within(60, "w4 runs jobs", async {
        while count(&idem, &running_w4).await == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;

    // Stopped at a moment it holds leases but not the write lock (a process stopped
    // holding the lock stops every process on the file, which no scheduling can help);
    // else let go and tried again.
    let w4 = fleet.pid("w4");
    within(60, "w4 stopped holding leases, not the write lock", async {
        loop {
            signal(w4, "STOP").await;
            until_stopped(w4).await;
            if write_lock_free(&db, Duration::from_secs(1)).await
                && count(&idem, &running_w4).await > 0
            {
                return;
            }
            signal(w4, "CONT").await;
        }
    })
    .await;
    // The others rescue w4's jobs (its leases expire) and complete them.
    let rescued = format!(
        "SELECT count(*) FROM idem_job_attempt a JOIN idem_job j ON j.id = a.job_id \
         WHERE j.queue = '{QUEUE}' AND a.outcome = 'lease_expired'"
    );
    let unfinished_rescued = format!(
        "SELECT count(*) FROM idem_job j WHERE j.queue = '{QUEUE}' AND j.state <> 'completed' \
         AND EXISTS (SELECT 1 FROM idem_job_attempt a WHERE a.job_id = j.id \
                     AND a.outcome = 'lease_expired')"
    );
    within(60, "w4's jobs are rescued and completed", async {
        while count(&idem, &running_w4).await > 0
            || count(&idem, &rescued).await == 0
            || count(&idem, &unfinished_rescued).await > 0
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let by_w4_so_far = "SELECT count(*) FROM test_effect WHERE worker = 'w4'";
    let before = count(&idem, by_w4_so_far).await;
    signal(w4, "CONT").await;
    // The feed ends once w4, resumed, has committed new work beside the others.
    within(60, "w4 works again after resuming", async {
        while count(&idem, by_w4_so_far).await <= before {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    stop_feed.send(true).expect("stop the feed");
    feeding.await.expect("feed");
    let fed = fed.load(Ordering::SeqCst);
    all_completed(&idem, fed).await;
    let reports = fleet.stop().await;

    let share = effects_once(&idem, fed).await;
    let rescued = count(&idem, &rescued).await;
    eprintln!("{fed} jobs; {rescued} rescued; per process {share:?}; reports {reports:?}");
    assert!(
        reports["w4"].lease_lost > 0,
        "w4's stale writes were refused on resuming: {:?}",
        reports["w4"]
    );
    let by_w4 = "SELECT count(*) FROM test_effect e JOIN idem_job_attempt a \
                 ON a.job_id = e.job_id WHERE a.outcome = 'lease_expired' AND e.worker = 'w4'";
    assert_eq!(
        count(&idem, by_w4).await,
        0,
        "w4's rescued jobs done by others"
    );
    // A younger job (enqueued later) that waited when a job was rescued and was claimed
    // clearly after the rescue (100 ms: the rescue's clock is read before its commit)
    // must not have been claimed before the rescued job.
    let overtaken = format!(
        "SELECT count(*) FROM idem_job r \
         JOIN idem_job_attempt a ON a.job_id = r.id AND a.outcome = 'lease_expired' \
         JOIN idem_job y ON y.queue = r.queue AND y.attempt = 1 AND y.created_at > r.created_at \
              AND y.created_at < a.finished_at AND y.attempted_at > a.finished_at + 100 \
              AND y.attempted_at < r.attempted_at \
         WHERE r.queue = '{QUEUE}'"
    );
    assert_eq!(
        count(&idem, &overtaken).await,
        0,
        "younger jobs claimed first"
    );
    // No pause in completions as long as the busy timeout.
    let gap = format!(
        "SELECT coalesce(max(gap), 0) FROM (SELECT finalized_at - lag(finalized_at) \
         OVER (ORDER BY finalized_at) AS gap FROM idem_job WHERE queue = '{QUEUE}')"
    );
    let gap = Duration::from_millis(count(&idem, &gap).await as u64);
    eprintln!("longest pause between completions: {gap:?}");
    assert!(gap < BUSY_TIMEOUT, "completions paused for {gap:?}");
    db.cleanup().await;
}
