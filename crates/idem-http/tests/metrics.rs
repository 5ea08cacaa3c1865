//! `GET /metrics` after a known workload, on both stores: the scraped counters and the
//! cached gauges equal what the database recorded (completed, dead, rescued), and only
//! operators may scrape.
//!
//! The `metrics` recorder is one per process, shared by every test of this binary: each
//! test works in a queue of its own and reads only that queue's series.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{MILL, OPS, Server, serve_router, tokens};
use idem::{
    EffectClass, Handler, Idem, Job, JobContext, JobError, ManualClock, ProtocolClaim, SqlValue,
    WorkerConfig, WorkerProtocol,
};
use idem_http::api::{Api, Limits};
use idem_http::idempotency::IdempotencyConfig;
use idem_http::metrics::{Access, Exporter};
use idem_store_tests::TestDb;
use serde_json::json;
use tokio::sync::mpsc;

/// Jobs that complete, die and are rescued after their lease expires.
const COMPLETE: usize = 5;
const DIE: usize = 3;
const RESCUE: usize = 2;

/// A queue no other test of this process uses.
fn own_queue() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("metrics-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Completes its job, or fails it for good when the args say `die`; tells the test.
struct Work {
    ran: mpsc::UnboundedSender<()>,
}

impl Handler for Work {
    const KIND: &'static str = "work";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, _cx: &mut JobContext, args: serde_json::Value) -> Result<(), JobError> {
        let _ = self.ran.send(());
        match args["die"].as_bool() {
            Some(true) => Err(JobError::permanent("told to die")),
            _ => Ok(()),
        }
    }
}

/// The API with `/metrics` for operators, on `idem`; the exporter refreshes its gauges
/// every 20 ms.
async fn server(idem: &Idem) -> (Server, Exporter) {
    let protocol = WorkerProtocol::new(idem.clone(), WorkerConfig::default()).unwrap();
    let api = Api {
        idem: idem.clone(),
        protocol,
        auth: tokens(),
        idempotency: IdempotencyConfig::default(),
        limits: Limits::default(),
        reconciler: None,
    };
    let exporter = Exporter::start_every(idem, Duration::from_millis(20)).unwrap();
    let router = api
        .router()
        .unwrap()
        .merge(exporter.router(Access::Operators(tokens())));
    (serve_router(idem.clone(), router).await, exporter)
}

/// Runs `COMPLETE` jobs to completion and `DIE` to dead on a worker in `queue`, and stops
/// the worker once every attempt's final write is made.
async fn complete_and_die(idem: &Idem, queue: &str) {
    for i in 0..COMPLETE + DIE {
        let args = json!({"die": i >= COMPLETE});
        idem.enqueue(Job::new("work", args).queue(queue))
            .await
            .unwrap();
    }
    let (ran, mut runs) = mpsc::unbounded_channel();
    let config = WorkerConfig {
        queues: [(queue.to_owned(), 4)].into(),
        ..WorkerConfig::default()
    };
    let mut worker = idem.worker(config).unwrap();
    worker.register(Work { ran }).unwrap();
    let running = worker.start();
    for _ in 0..COMPLETE + DIE {
        tokio::time::timeout(Duration::from_secs(30), runs.recv())
            .await
            .expect("every job runs")
            .unwrap();
    }
    // A shutdown waits for the jobs' final writes.
    let report = running.shutdown().await;
    assert_eq!(
        (report.completed, report.dead),
        (COMPLETE as u64, DIE as u64)
    );
}

/// Claims `RESCUE` jobs of a kind no worker runs, lets their lease expire on `clock` and
/// rescues them.
async fn rescue_expired(idem: &Idem, clock: &ManualClock, queue: &str) {
    for _ in 0..RESCUE {
        idem.enqueue(Job::new("ghost", json!({})).queue(queue))
            .await
            .unwrap();
    }
    let protocol = WorkerProtocol::new(idem.clone(), WorkerConfig::default()).unwrap();
    let claim = ProtocolClaim {
        queue: queue.to_owned(),
        kinds: vec!["ghost".into()],
        limit: 10,
        lease_ms: None,
        worker: "ghost-worker".into(),
        principal: None,
    };
    assert_eq!(protocol.claim(claim).await.unwrap().len(), RESCUE);
    clock.advance(Duration::from_secs(31));
    assert_eq!(idem.rescue().await.unwrap().len(), RESCUE);
}

/// `SELECT count(*) …` on the store, with `queue` as `$1`.
async fn db_count(idem: &Idem, sql: &str, queue: &str) -> u64 {
    let rows = idem
        .store()
        .query(sql, &[SqlValue::Text(queue.to_owned())])
        .await
        .unwrap();
    match &rows[0][0] {
        SqlValue::Int(n) => *n as u64,
        other => panic!("count: {other:?}"),
    }
}

/// The sum of the samples of `name` whose labels include `labels`, in Prometheus text.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut sum = 0.0;
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line.rsplit_once(' ').expect("a sample line");
        let (metric, rest) = series.split_once('{').unwrap_or((series, "}"));
        if metric != name {
            continue;
        }
        let found: BTreeMap<&str, &str> = rest
            .trim_end_matches('}')
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k, v.trim_matches('"')))
            .collect();
        if labels.iter().all(|(k, v)| found.get(k) == Some(v)) {
            sum += value.parse::<f64>().expect("a number");
        }
    }
    sum
}

/// Waits until the gauges were refreshed twice more, so once after the workload.
async fn refreshed(exporter: &Exporter) {
    let mut refreshes = exporter.gauges().refreshes();
    let start = *refreshes.borrow_and_update();
    tokio::time::timeout(
        Duration::from_secs(30),
        refreshes.wait_for(|n| *n >= start + 2),
    )
    .await
    .expect("the gauges refresh")
    .unwrap();
}

/// After a known workload the scraped counters and gauges equal the database's counts.
async fn scraped_counters_equal_the_database(db: &TestDb) {
    let clock = ManualClock::new(db.store.now().await.unwrap());
    let idem = Idem::from_store(db.store.clone()).with_clock(Arc::new(clock.clone()));
    let (s, exporter) = server(&idem).await;
    let queue = own_queue();
    complete_and_die(&idem, &queue).await;
    rescue_expired(&idem, &clock, &queue).await;
    refreshed(&exporter).await;

    let a = s.get(OPS, "/metrics").await;
    assert_eq!(a.status, 200, "{a:?}");
    assert!(a.header("content-type").unwrap().starts_with("text/plain"));
    let text = String::from_utf8(a.body).unwrap();
    let q = queue.as_str();
    let state = "SELECT count(*) FROM idem_job WHERE queue = $1 AND state = ";
    let completed = db_count(&idem, &format!("{state}'completed'"), q).await;
    let dead = db_count(&idem, &format!("{state}'dead'"), q).await;
    let rescued = db_count(
        &idem,
        "SELECT count(*) FROM idem_job_attempt a JOIN idem_job j ON j.id = a.job_id \
         WHERE j.queue = $1 AND a.outcome = 'lease_expired'",
        q,
    )
    .await;
    assert_eq!(
        (completed, dead, rescued),
        (COMPLETE as u64, DIE as u64, RESCUE as u64),
        "the workload"
    );
    let scraped = |name| sample(&text, name, &[("queue", q)]) as u64;
    assert_eq!(
        (
            scraped("idem_jobs_completed_total"),
            scraped("idem_jobs_dead_total"),
            scraped("idem_jobs_rescued_total"),
        ),
        (completed, dead, rescued),
        "counters against the database:\n{text}"
    );
    assert_eq!(
        scraped("idem_jobs_claimed_total"),
        (COMPLETE + DIE + RESCUE) as u64
    );
    let gauge = |state| sample(&text, "idem_jobs", &[("queue", q), ("state", state)]) as u64;
    assert_eq!(
        (gauge("completed"), gauge("dead"), gauge("retryable")),
        (completed, dead, rescued),
        "gauges against the database:\n{text}"
    );
    let waited = sample(&text, "idem_job_queue_wait_seconds_count", &[("queue", q)]);
    assert_eq!(
        waited as usize,
        COMPLETE + DIE + RESCUE,
        "one wait per claim"
    );
    let ran = sample(&text, "idem_job_run_seconds_count", &[("queue", q)]);
    assert_eq!(
        ran as usize,
        COMPLETE + DIE,
        "one run time per attempt here"
    );
    exporter.stop().await;
}

/// `/metrics` is for operators: no token is 401, a client's token 403.
async fn only_operators_scrape(db: &TestDb) {
    let idem = Idem::from_store(db.store.clone());
    let (s, exporter) = server(&idem).await;
    assert_eq!(s.get("", "/metrics").await.status, 401);
    let client = s.get(MILL, "/metrics").await;
    assert_eq!(client.status, 403, "{client:?}");
    assert_eq!(client.problem(), "operator_only");
    assert_eq!(s.get(OPS, "/metrics").await.status, 200);
    exporter.stop().await;
}

idem_store_tests::store_cases!(scraped_counters_equal_the_database, only_operators_scrape);
