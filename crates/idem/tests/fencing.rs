//! The fencing proof, on both stores: a handler is held past its lease, another worker
//! reclaims and completes the job, and the first handler's effect transaction and its
//! completion are refused with a lost lease; the effect row exists exactly once.
//!
//! Time is injected. Worker A runs on a clock frozen at t0, so its heartbeats (if any
//! fire) extend the lease only to t0 + lease; the test and worker B run on a clock moved
//! past the lease. Every wait is on a signal.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use idem::{
    AttemptOutcome, EffectClass, Handler, Idem, Job, JobContext, JobError, JobState, ManualClock,
};
use idem_store::JobComplete;
use idem_store_tests::{TestDb, harness::within};

/// Worker A's handler: reports that it started, waits to be released, then tries to
/// open its effect transaction and to complete, and reports both results.
struct Stalled {
    started: Once<()>,
    release: Gate,
    report: Once<(bool, bool)>,
}

impl Handler for Stalled {
    const KIND: &'static str = EFFECT_KIND;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        self.started.fire(()).await;
        self.release.wait().await;
        let begin_refused = match cx.begin().await {
            Ok(_) => false,
            Err(e) => e.is_lease_lost(),
        };
        let params = JobComplete {
            lease: cx.lease(),
            now: None,
        };
        let complete_refused = match cx.store().job_complete(params).await {
            Ok(_) => false,
            Err(e) => e.is_lease_lost(),
        };
        self.report.fire((begin_refused, complete_refused)).await;
        // Returning Ok makes the engine try to complete with the stale fence as well.
        Ok(())
    }
}

/// A worker running [`Stalled`], with the signals to drive it: it has started the job
/// when this returns; send on the first to release it, read the second for its report.
async fn start_stalled(
    idem: &Idem,
) -> (
    idem::WorkerHandle,
    tokio::sync::oneshot::Sender<()>,
    tokio::sync::oneshot::Receiver<(bool, bool)>,
) {
    let (started, started_rx) = Once::new();
    let (release, release_tx) = Gate::new();
    let (report, report_rx) = Once::new();
    let mut w = idem.worker(config("fence", 1)).unwrap();
    let stalled = Stalled {
        started,
        release,
        report,
    };
    w.register(stalled).unwrap();
    let w = w.start();
    within(30, "the stalled worker starts the job", started_rx)
        .await
        .unwrap();
    (w, release_tx, report_rx)
}

/// Worker A's client on a clock frozen at t0 (its heartbeats never reach past t0 + lease),
/// worker B's and the test's on a clock that can move past it, an effect table, and one
/// job enqueued at t0.
async fn two_clocks(db: &TestDb) -> (Idem, Idem, Arc<ManualClock>, idem::JobRow) {
    let frozen = db_clock(db).await;
    let moving = Arc::new(ManualClock::new(frozen.get()));
    let idem_a = client(db, Some(Arc::new(frozen)));
    let idem_b = client(db, Some(moving.clone()));
    create_effect_table(&idem_b).await;
    let job = idem_b
        .enqueue(Job::new(EFFECT_KIND, serde_json::json!({})).queue("fence"))
        .await
        .unwrap()
        .job;
    (idem_a, idem_b, moving, job)
}

async fn stale_worker_cannot_commit(db: &TestDb) {
    let (idem_a, idem_b, moving, job) = two_clocks(db).await;

    let (a, release_tx, report_rx) = start_stalled(&idem_a).await;

    // A is now held past its lease: move the clock beyond it and rescue.
    moving.advance(Duration::from_secs(31));
    let rescued = idem_b.rescue().await.unwrap();
    assert_eq!(
        rescued.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![job.id]
    );

    let (done, done_rx) = Once::new();
    let mut b = idem_b.worker(config("fence", 1)).unwrap();
    b.register(WriteEffect { worker: "B", done }).unwrap();
    let b = b.start();
    let (b_fence, _) = within(30, "worker B completes the job", done_rx)
        .await
        .unwrap();
    assert_eq!(b_fence, job.fence + 2, "B's claim is the second one");

    release_tx.send(()).unwrap();
    let (begin_refused, complete_refused) = within(30, "A reports", report_rx).await.unwrap();
    assert!(
        begin_refused,
        "A's effect transaction must be refused with LeaseLost"
    );
    assert!(
        complete_refused,
        "A's completion must be refused with LeaseLost"
    );

    let report_a = within(30, "A shuts down", a.shutdown()).await;
    let report_b = within(30, "B shuts down", b.shutdown()).await;
    assert_eq!(report_a.completed, 0);
    assert_eq!(
        report_a.lease_lost, 1,
        "the engine's own stale completion was refused"
    );
    assert_eq!(report_b.completed, 1);

    assert_eq!(
        effects(&idem_b).await,
        vec![(job.id, b_fence, "B".to_owned())]
    );
    let after = common::job(&idem_b, job.id).await;
    assert_eq!(after.state, JobState::Completed);
    assert_eq!((after.fence, after.attempt), (b_fence, 2));
    let history: Vec<_> = idem_b.attempts(job.id).await.unwrap();
    let outcomes: Vec<_> = history.iter().map(|a| (a.fence, a.outcome)).collect();
    assert_eq!(
        outcomes,
        vec![
            (job.fence + 1, AttemptOutcome::LeaseExpired),
            (b_fence, AttemptOutcome::Completed)
        ]
    );
}

/// A cancelled running job fences its worker out the same way.
async fn cancel_fences_out_the_running_worker(db: &TestDb) {
    let idem = client(db, None);
    create_effect_table(&idem).await;
    let job = idem
        .enqueue(Job::new(EFFECT_KIND, serde_json::json!({})).queue("fence"))
        .await
        .unwrap();
    let (w, release_tx, report_rx) = start_stalled(&idem).await;
    let cancelled = idem.cancel(job.id).await.unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);
    release_tx.send(()).unwrap();
    let (begin_refused, complete_refused) = within(30, "report", report_rx).await.unwrap();
    assert!(begin_refused && complete_refused);
    let report = within(30, "shutdown", w.shutdown()).await;
    assert_eq!((report.completed, report.lease_lost), (0, 1));
    assert_eq!(common::job(&idem, job.id).await.state, JobState::Cancelled);
}

/// Waits until the worker's heartbeat reports its claim lost, then tries to write.
struct WaitsForLoss {
    started: Once<()>,
    refused: Once<bool>,
}

impl Handler for WaitsForLoss {
    const KIND: &'static str = EFFECT_KIND;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        self.started.fire(()).await;
        cx.lease_lost().await;
        let refused = match cx.begin().await {
            Ok(_) => false,
            Err(e) => e.is_lease_lost(),
        };
        self.refused.fire(refused && cx.is_lease_lost()).await;
        Ok(())
    }
}

/// The heartbeat tells a handler whose job was reclaimed that its lease is lost.
async fn heartbeat_tells_a_stale_handler(db: &TestDb) {
    let (idem_a, idem_b, moving, job) = two_clocks(db).await;
    let (started, started_rx) = Once::new();
    let (refused, refused_rx) = Once::new();
    let cfg = config("fence", 1).lease(Duration::from_millis(300));
    let mut a = idem_a.worker(cfg).unwrap();
    a.register(WaitsForLoss { started, refused }).unwrap();
    let a = a.start();
    within(30, "A starts", started_rx).await.unwrap();
    moving.advance(Duration::from_secs(31));
    assert_eq!(idem_b.rescue().await.unwrap().len(), 1);
    let (done, done_rx) = Once::new();
    let mut b = idem_b.worker(config("fence", 1)).unwrap();
    b.register(WriteEffect { worker: "B", done }).unwrap();
    let b = b.start();
    within(30, "B completes", done_rx).await.unwrap();
    let refused = within(30, "A hears of the loss", refused_rx).await.unwrap();
    assert!(refused, "A learns of the loss and its write is refused");
    within(30, "A shuts down", a.shutdown()).await;
    within(30, "B shuts down", b.shutdown()).await;
    assert_eq!(effects(&idem_b).await.len(), 1);
    assert_eq!(
        common::job(&idem_b, job.id).await.state,
        JobState::Completed
    );
}

idem_store_tests::store_cases!(
    heartbeat_tells_a_stale_handler,
    stale_worker_cannot_commit,
    cancel_fences_out_the_running_worker
);
