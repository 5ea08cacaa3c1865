//! Limits a handler declares for its kind: a timeout shorter than the worker's, and fewer
//! attempts than the worker's cap; a rescued job past its kind's limit does not run
//! again; limits that would loosen the worker's are refused when registered.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use idem::retry::RetryLadder;
use idem::{EffectClass, Handler, Idem, Job, JobContext, JobError, JobState};
use idem_store::JobClaim;
use idem_store_tests::TestDb;
use idem_store_tests::harness::within;
use tokio::sync::mpsc;

/// Fails every attempt; allows `limit` attempts for its kind.
struct Failing {
    limit: i32,
    ran: mpsc::UnboundedSender<i32>,
}

impl Handler for Failing {
    const KIND: &'static str = "failing";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let _ = self.ran.send(cx.job().attempt);
        Err(JobError::retry("always fails"))
    }

    fn max_attempts(&self) -> Option<i32> {
        Some(self.limit)
    }
}

/// Never finishes; its kind's timeout is `timeout`, and it gets one attempt.
struct Hangs {
    timeout: Duration,
}

impl Handler for Hangs {
    const KIND: &'static str = "hangs";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, _: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        std::future::pending().await
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    fn max_attempts(&self) -> Option<i32> {
        Some(1)
    }
}

/// A worker on queue `q` retrying at once, with a cap of 10 attempts.
fn worker_config() -> idem::WorkerConfig {
    let mut cfg = config("q", 2);
    cfg.ladder = RetryLadder::new(vec![Duration::ZERO]).jitter(0.0);
    cfg.max_attempts = 10;
    cfg
}

async fn enqueue(idem: &Idem, kind: &str) -> i64 {
    let job = Job::new(kind, serde_json::json!({}))
        .queue("q")
        .max_attempts(20);
    idem.enqueue(job).await.unwrap().id
}

/// A kind that allows 3 attempts ends dead after the 3rd, though the job allows 20 and
/// the worker 10; the last error says whose limit it was.
async fn a_kind_limit_ends_the_job_before_the_worker_cap(db: &TestDb) {
    let idem = client(db, None);
    let (tx, mut ran) = events();
    let mut w = idem.worker(worker_config()).unwrap();
    w.register(Failing { limit: 3, ran: tx }).unwrap();
    let id = enqueue(&idem, "failing").await;
    let w = w.start();
    let row = until(&idem, id, "dead", |j| j.state == JobState::Dead).await;
    within(30, "shutdown", w.shutdown()).await;
    assert_eq!(row.attempt, 3, "{row:?}");
    let error = row.last_error.unwrap_or_default();
    assert!(error.contains("limit of kind \"failing\""), "{error}");
    let mut attempts = Vec::new();
    while let Ok(a) = ran.try_recv() {
        attempts.push(a);
    }
    assert_eq!(attempts, vec![1, 2, 3]);
}

/// A kind's timeout stops its attempt long before the worker's job timeout.
async fn a_kind_timeout_stops_the_attempt(db: &TestDb) {
    let idem = client(db, None);
    let mut cfg = worker_config();
    cfg.job_timeout = Duration::from_secs(3600);
    let mut w = idem.worker(cfg).unwrap();
    w.register(Hangs {
        timeout: Duration::from_millis(100),
    })
    .unwrap();
    let id = enqueue(&idem, "hangs").await;
    let w = w.start();
    let row = until(&idem, id, "dead", |j| j.state == JobState::Dead).await;
    let report = within(30, "shutdown", w.shutdown()).await;
    let error = row.last_error.unwrap_or_default();
    assert!(
        error.contains("timed out after 100ms (the timeout of its kind)"),
        "{error}"
    );
    assert_eq!(report.timed_out, 1, "{report:?}");
}

/// A job whose attempt at its kind's limit ended with a lost lease (rescued) is claimed
/// again and written dead without running.
async fn a_rescued_job_past_its_kind_limit_does_not_run(db: &TestDb) {
    let clock = Arc::new(db_clock(db).await);
    let idem = client(db, Some(clock.clone()));
    let id = enqueue(&idem, "failing").await;
    let claimed = db
        .store
        .job_claim(JobClaim {
            queue: "q".into(),
            limit: 1,
            lease_ms: 1_000,
            worker: "gone".into(),
            kinds: None,
            principal: None,
            now: idem::Clock::now(&*clock),
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    clock.advance(Duration::from_secs(5));
    assert_eq!(idem.rescue().await.unwrap().len(), 1);
    let (tx, mut ran) = events();
    let mut w = idem.worker(worker_config()).unwrap();
    w.register(Failing { limit: 1, ran: tx }).unwrap();
    let w = w.start();
    let row = until(&idem, id, "dead", |j| j.state == JobState::Dead).await;
    within(30, "shutdown", w.shutdown()).await;
    assert_eq!(row.attempt, 2, "{row:?}");
    let error = row.last_error.unwrap_or_default();
    assert!(
        error.contains("past the limit of kind \"failing\""),
        "{error}"
    );
    assert!(ran.try_recv().is_err(), "the handler never ran");
}

/// Limits looser than the worker's, or empty, are refused when registered, naming the
/// setting to raise.
async fn limits_looser_than_the_workers_are_refused(db: &TestDb) {
    let idem = client(db, None);
    let (tx, _ran) = events();
    for limit in [0, 11] {
        let mut w = idem.worker(worker_config()).unwrap();
        let err = w
            .register(Failing {
                limit,
                ran: tx.clone(),
            })
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("max_attempts"), "{err}");
    }
    for timeout in [Duration::ZERO, Duration::from_secs(3600)] {
        let mut w = idem.worker(worker_config()).unwrap();
        let err = w
            .register(Hangs { timeout })
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("job_timeout"), "{err}");
    }
}

idem_store_tests::store_cases!(
    a_kind_limit_ends_the_job_before_the_worker_cap,
    a_kind_timeout_stops_the_attempt,
    a_rescued_job_past_its_kind_limit_does_not_run,
    limits_looser_than_the_workers_are_refused,
);
