//! Attack on issue 16, item 2 through the engine: a rescue with no delay (what workers
//! and `Idem::rescue` use) now keeps the job's `run_at`. The metric
//! `idem_job_queue_wait_seconds` is documented as the time "from when a job could start
//! (the later of `run_at` and `created_at`) to its claim"; it reads `run_at` of the
//! claimed row. A claim after a rescue is now left out of it.

mod common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::*;
use idem::telemetry::metrics::QUEUE_WAIT;
use idem::{EffectClass, Handler, Job, JobContext, JobError};
use idem_store::JobClaim;
use idem_store_tests::{TestDb, harness::within};
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// Every value recorded into `idem_job_queue_wait_seconds`, with its queue label.
type Samples = Arc<Mutex<Vec<(String, f64)>>>;

struct Capture(Samples);

struct Sink {
    queue: Option<String>,
    samples: Option<Samples>,
}

impl CounterFn for Sink {
    fn increment(&self, _: u64) {}
    fn absolute(&self, _: u64) {}
}

impl GaugeFn for Sink {
    fn increment(&self, _: f64) {}
    fn decrement(&self, _: f64) {}
    fn set(&self, _: f64) {}
}

impl HistogramFn for Sink {
    fn record(&self, value: f64) {
        if let (Some(q), Some(s)) = (&self.queue, &self.samples) {
            s.lock().expect("samples").push((q.clone(), value));
        }
    }
}

fn nothing() -> Arc<Sink> {
    Arc::new(Sink {
        queue: None,
        samples: None,
    })
}

impl Recorder for Capture {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(nothing())
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(nothing())
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        if key.name() != QUEUE_WAIT {
            return Histogram::from_arc(nothing());
        }
        let queue = key
            .labels()
            .find(|l| l.key() == "queue")
            .map(|l| l.value().to_owned());
        Histogram::from_arc(Arc::new(Sink {
            queue,
            samples: Some(self.0.clone()),
        }))
    }
}

fn samples() -> Samples {
    static SAMPLES: OnceLock<Samples> = OnceLock::new();
    SAMPLES
        .get_or_init(|| {
            let s: Samples = Arc::default();
            metrics::set_global_recorder(Capture(s.clone())).expect("the only recorder");
            s
        })
        .clone()
}

/// Completes every job, telling the test.
struct Done(tokio::sync::mpsc::UnboundedSender<i64>);

impl Handler for Done {
    const KIND: &'static str = "attack16_done";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let _ = self.0.send(cx.job().id);
        Ok(())
    }
}

/// Found by the attack of 2026-12-04 and fixed since (item 2). A job enqueued at t0 is claimed at t0 by a worker that dies (a
/// 1-minute lease); an hour later (injected clock) the rescue moves it back to
/// retryable with its old `run_at`, and a worker claims it at once. It could start again
/// only from the rescue, and waited no time at all for a worker, yet the queue-wait
/// histogram records the whole hour: `metrics::started` takes `attempted_at - run_at`,
/// and `run_at` is still t0. Before the change the rescue set `run_at` to its own now
/// and the sample was 0. Every crash or lost lease now shows as a queue-wait outlier of
/// the lease length plus the dead attempt (alerts on queue wait fire for crashes).
/// Suggested fix: keep the place with a separate ordering column, or measure from the
/// later of `run_at` and the previous attempt's end (`finalized`/rescue time).
async fn queue_wait_of_a_rescued_job(db: TestDb, queue: &str) {
    let samples = samples();
    let clock = Arc::new(db_clock(&db).await);
    let idem = client(&db, Some(clock.clone()));
    let t0 = clock.get();
    let new = Job::new("attack16_done", serde_json::json!({})).queue(queue);
    let id = idem.enqueue(new).await.expect("enqueue").id;

    // The worker that dies: claimed at t0 with a one-minute lease, never heard of again.
    let claimed = db
        .store
        .job_claim(JobClaim {
            queue: queue.into(),
            limit: 1,
            lease_ms: 60_000,
            worker: "died".into(),
            kinds: None,
            principal: None,
            now: Some(t0),
        })
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1);

    clock.advance(Duration::from_secs(3600));
    let rescued = idem.rescue().await.expect("rescue");
    assert_eq!(rescued.iter().map(|j| j.id).collect::<Vec<_>>(), [id]);

    let (tx, mut done) = tokio::sync::mpsc::unbounded_channel();
    let mut w = idem.worker(config(queue, 1)).expect("worker");
    w.register(Done(tx)).expect("register");
    let w = w.start();
    assert_eq!(
        within(30, "the rescued job runs", done.recv()).await,
        Some(id)
    );
    w.shutdown().await;
    let row = job(&idem, id).await;
    let waits: Vec<f64> = samples
        .lock()
        .expect("samples")
        .iter()
        .filter(|(q, _)| q == queue)
        .map(|(_, v)| *v)
        .collect();
    db.cleanup().await;
    // The rescue time is not on the row, so the claim after it is not counted; what is
    // counted must not include the lost attempt.
    assert!(
        waits.iter().all(|w| *w < 1.0),
        "the rescued job was claimed the moment it was rescued (attempted_at {:?}, run_at \
         {:?}), but its queue wait was recorded as {waits:?} s",
        row.attempted_at,
        row.run_at,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescued_job_s_queue_wait_leaves_out_the_lost_attempt_sqlite() {
    queue_wait_of_a_rescued_job(TestDb::sqlite().await, "attack16_sqlite").await;
}

/// The same on PostgreSQL (its `rescue.sql` keeps `run_at` the same way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescued_job_s_queue_wait_leaves_out_the_lost_attempt_postgres() {
    if let Some(db) = TestDb::postgres().await {
        queue_wait_of_a_rescued_job(db, "attack16_pg").await;
    }
}
