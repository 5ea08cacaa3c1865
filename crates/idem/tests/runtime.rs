//! The worker runtime on both stores: panics and timeouts are failed attempts, a job of
//! a kind the worker has no handler for is not claimed (it waits, spending no attempt),
//! undecodable args do not stop a worker, shutdown is graceful (also when a
//! future asks for it), concurrency is bounded per queue, and a caller's transaction
//! carries enqueues.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::*;
use idem::{
    AttemptOutcome, EffectClass, Handler, Job, JobContext, JobError, JobList, JobState,
    WorkerConfig,
};
use idem_store_tests::{TestDb, harness::within};
use serde::Deserialize;
use tokio::sync::mpsc;

/// Misbehaves on the first attempt (panics or hangs), completes on the next.
struct FlakyOnce {
    hang: bool,
    done: mpsc::UnboundedSender<i32>,
}

impl Handler for FlakyOnce {
    const KIND: &'static str = "flaky";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let attempt = cx.job().attempt;
        if attempt == 1 && self.hang {
            std::future::pending::<()>().await;
        }
        if attempt == 1 {
            panic!("boom on attempt {attempt}");
        }
        let _ = self.done.send(attempt);
        Ok(())
    }
}

async fn run_flaky(db: &TestDb, hang: bool) -> (Vec<idem::AttemptRow>, idem::WorkerReport) {
    let idem = client(db, None);
    let job = idem
        .enqueue(Job::new("flaky", serde_json::json!({})).queue("q"))
        .await
        .unwrap();
    let (tx, mut rx) = events();
    let mut cfg = immediate_retries("q", 2);
    if hang {
        cfg.job_timeout = Duration::from_millis(200);
    }
    let mut w = idem.worker(cfg).unwrap();
    w.register(FlakyOnce { hang, done: tx }).unwrap();
    let w = w.start();
    assert_eq!(within(30, "second attempt", rx.recv()).await, Some(2));
    let report = within(30, "shutdown", w.shutdown()).await;
    assert_eq!(common::job(&idem, job.id).await.state, JobState::Completed);
    (idem.attempts(job.id).await.unwrap(), report)
}

async fn panicking_handler_is_a_failed_attempt(db: &TestDb) {
    let (history, report) = run_flaky(db, false).await;
    assert_eq!(history[0].outcome, AttemptOutcome::Retryable);
    let err = history[0].error.as_deref().unwrap_or_default();
    assert!(err.contains("panicked: boom on attempt 1"), "{err}");
    assert_eq!(history[1].outcome, AttemptOutcome::Completed);
    assert_eq!(
        (report.panicked, report.completed, report.retried),
        (1, 1, 1)
    );
}

async fn job_timeout_fails_the_attempt(db: &TestDb) {
    let (history, report) = run_flaky(db, true).await;
    let err = history[0].error.as_deref().unwrap_or_default();
    assert!(err.contains("timed out after 200ms"), "{err}");
    assert_eq!(history[1].outcome, AttemptOutcome::Completed);
    assert_eq!((report.timed_out, report.completed), (1, 1));
}

#[derive(Deserialize)]
struct Count {
    n: i64,
}

/// Completes jobs whose args decode as `{n: integer}`.
struct Counter {
    done: mpsc::UnboundedSender<i64>,
}

impl Handler for Counter {
    const KIND: &'static str = "count";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = Count;

    async fn run(&self, _: &mut JobContext, args: Count) -> Result<(), JobError> {
        let _ = self.done.send(args.n);
        Ok(())
    }
}

async fn bad_jobs_do_not_stop_the_worker(db: &TestDb) {
    let idem = client(db, None);
    let unknown = idem
        .enqueue(Job::new("nobody-handles-this", serde_json::json!({})).queue("q"))
        .await
        .unwrap();
    let undecodable = idem
        .enqueue(Job::new("count", serde_json::json!({"n": "seven"})).queue("q"))
        .await
        .unwrap();
    let good = idem
        .enqueue(Job::new("count", serde_json::json!({"n": 7})).queue("q"))
        .await
        .unwrap();
    let (tx, mut rx) = events();
    let mut w = idem.worker(config("q", 1)).unwrap();
    w.register(Counter { done: tx }).unwrap();
    let w = w.start();
    assert_eq!(within(30, "the good job runs", rx.recv()).await, Some(7));
    let report = within(30, "shutdown", w.shutdown()).await;

    assert_eq!(common::job(&idem, good.id).await.state, JobState::Completed);
    let dead = common::job(&idem, undecodable.id).await;
    assert_eq!(dead.state, JobState::Dead, "undecodable args are permanent");
    let err = dead.last_error.unwrap_or_default();
    assert!(
        err.contains("args of job kind \"count\" do not decode"),
        "{err}"
    );
    let waiting = common::job(&idem, unknown.id).await;
    assert_eq!(
        waiting, unknown.job,
        "a kind no handler is registered for waits as enqueued: never claimed, no attempt \
         spent, for a worker that knows the kind"
    );
    assert!(idem.attempts(unknown.id).await.unwrap().is_empty());
    assert_eq!((report.completed, report.dead, report.retried), (1, 1, 0));
    assert_eq!(report.claimed, 2, "only the jobs of the registered kind");
}

/// Holds every job until released; reports each start.
struct Holding {
    started: mpsc::UnboundedSender<i64>,
    release: tokio::sync::watch::Receiver<bool>,
    finished: AtomicU32,
}

impl Handler for Holding {
    const KIND: &'static str = "hold";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let _ = self.started.send(cx.job().id);
        let mut release = self.release.clone();
        let _ = release.wait_for(|r| *r).await;
        self.finished.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A worker with `cfg` running [`Holding`]; the receiver hears each job start, the
/// sender releases them all.
fn holding(
    idem: &idem::Idem,
    cfg: WorkerConfig,
) -> (
    idem::Worker,
    mpsc::UnboundedReceiver<i64>,
    tokio::sync::watch::Sender<bool>,
) {
    let (started, started_rx) = events();
    let (release_tx, release) = tokio::sync::watch::channel(false);
    let mut w = idem.worker(cfg).unwrap();
    w.register(Holding {
        started,
        release,
        finished: AtomicU32::new(0),
    })
    .unwrap();
    (w, started_rx, release_tx)
}

async fn enqueue_holds(idem: &idem::Idem, n: usize) -> Vec<i64> {
    let jobs = (0..n)
        .map(|i| Job::new("hold", serde_json::json!({"i": i})).queue("q"))
        .collect();
    let rows = idem.enqueue_many(jobs).await.unwrap();
    rows.into_iter().map(|r| r.id).collect()
}

async fn concurrency_is_bounded_per_queue(db: &TestDb) {
    let idem = client(db, None);
    enqueue_holds(&idem, 5).await;
    let (w, mut started, release) = holding(&idem, config("q", 2));
    let w = w.start();
    for _ in 0..2 {
        within(30, "a job starts", started.recv()).await.unwrap();
    }
    let running = idem
        .jobs(JobList {
            state: Some(JobState::Running),
            limit: 100,
            ..JobList::default()
        })
        .await
        .unwrap();
    assert_eq!(running.len(), 2, "two slots, two leases");
    release.send(true).unwrap();
    for _ in 0..3 {
        within(30, "the rest start", started.recv()).await.unwrap();
    }
    let report = within(30, "shutdown", w.shutdown()).await;
    assert_eq!((report.claimed, report.completed), (5, 5));
}

async fn shutdown_lets_running_jobs_finish_and_claims_no_more(db: &TestDb) {
    let idem = client(db, None);
    let ids = enqueue_holds(&idem, 2).await;
    let (w, mut started, release) = holding(&idem, config("q", 1));
    let w = w.start();
    let first = within(30, "a job starts", started.recv()).await.unwrap();
    let mut shutdown = Box::pin(w.shutdown());
    // One poll sends the stop signal before the running job is released.
    assert!(futures::poll!(shutdown.as_mut()).is_pending());
    release.send(true).unwrap();
    let report = within(30, "shutdown", shutdown).await;
    assert_eq!((report.claimed, report.completed), (1, 1));
    assert_eq!(common::job(&idem, first).await.state, JobState::Completed);
    let other = ids.into_iter().find(|id| *id != first).unwrap();
    assert_eq!(common::job(&idem, other).await.state, JobState::Available);
}

/// `shutdown_when` keeps the worker running until its future resolves (a second job is
/// claimed after the first finished), then shuts down gracefully.
async fn shutdown_when_waits_for_its_future(db: &TestDb) {
    let idem = client(db, None);
    enqueue_holds(&idem, 1).await;
    let (w, mut started, release) = holding(&idem, config("q", 1));
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let stopping = tokio::spawn(w.start().shutdown_when(stop_rx));
    within(30, "the first job starts", started.recv())
        .await
        .unwrap();
    release.send(true).unwrap();
    let second = enqueue_holds(&idem, 1).await[0];
    let next = within(30, "the second job starts", started.recv()).await;
    assert_eq!(next, Some(second), "still claiming before the stop");
    assert!(!stopping.is_finished());
    stop.send(()).unwrap();
    let report = within(30, "shutdown", stopping).await.unwrap();
    assert_eq!((report.claimed, report.completed), (2, 2));
    assert_eq!(common::job(&idem, second).await.state, JobState::Completed);
}

async fn shutdown_timeout_stops_a_stuck_job_for_a_later_retry(db: &TestDb) {
    let idem = client(db, None);
    let ids = enqueue_holds(&idem, 1).await;
    let mut cfg = config("q", 1);
    cfg.shutdown_timeout = Duration::from_millis(50);
    let (w, mut started, _release) = holding(&idem, cfg);
    let w = w.start();
    within(30, "the job starts", started.recv()).await.unwrap();
    let report = within(30, "shutdown", w.shutdown()).await;
    assert_eq!((report.completed, report.retried), (0, 1));
    let job = common::job(&idem, ids[0]).await;
    assert_eq!(job.state, JobState::Retryable);
    assert!(
        job.last_error
            .unwrap_or_default()
            .contains("worker shut down")
    );
}

async fn caller_transaction_carries_enqueues(db: &TestDb) {
    let idem = client(db, None);
    create_effect_table(&idem).await;
    let mut tx = idem.begin().await.unwrap();
    let kept = idem
        .enqueue_tx(&mut tx, Job::new("count", serde_json::json!({"n": 1})))
        .await
        .unwrap();
    tx.execute(
        "INSERT INTO test_effect (job_id, fence, worker) VALUES ($1, 0, 'producer')",
        &[kept.id.into()],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let mut tx = idem.begin().await.unwrap();
    let dropped = idem
        .enqueue_tx(&mut tx, Job::new("count", serde_json::json!({"n": 2})))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(idem.job(kept.id).await.unwrap().is_some());
    assert!(idem.job(dropped.id).await.unwrap().is_none());
    assert_eq!(effects(&idem).await.len(), 1);
}

async fn invalid_jobs_and_configs_are_refused_whole(db: &TestDb) {
    let idem = client(db, None);
    let err = idem
        .enqueue_many(vec![
            Job::new("count", serde_json::json!({"n": 1})),
            Job::new("", serde_json::json!({})),
        ])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("kind \"\""), "{err}");
    assert!(
        idem.jobs(JobList {
            limit: 10,
            ..JobList::default()
        })
        .await
        .unwrap()
        .is_empty()
    );
    let mut cfg = WorkerConfig::default();
    cfg.heartbeat_interval = cfg.lease;
    let err = idem.worker(cfg).err().expect("refused").to_string();
    assert!(
        err.contains("heartbeat interval is 30s with a lease of 30s"),
        "{err}"
    );
    let mut w = idem.worker(config("q", 1)).unwrap();
    let (tx, _rx) = events();
    w.register(Counter { done: tx.clone() }).unwrap();
    let err = w
        .register(Counter { done: tx })
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("already registered"), "{err}");
}

idem_store_tests::store_cases!(
    panicking_handler_is_a_failed_attempt,
    job_timeout_fails_the_attempt,
    bad_jobs_do_not_stop_the_worker,
    concurrency_is_bounded_per_queue,
    shutdown_lets_running_jobs_finish_and_claims_no_more,
    shutdown_timeout_stops_a_stuck_job_for_a_later_retry,
    shutdown_when_waits_for_its_future,
    caller_transaction_carries_enqueues,
    invalid_jobs_and_configs_are_refused_whole,
);
