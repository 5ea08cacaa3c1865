//! Attacks on "retention covers the retry horizon": a job whose first attempt committed
//! an effect (its effect key with it) and which runs again later than the effect-key
//! window must still find its key, or it makes the effect a second time.
//!
//! Each case runs a two-step handler: its first attempt commits its effect in a fenced
//! transaction without completing (`EffectTx::commit`), then ends in a way that makes the
//! job run again later; every later attempt makes the same effect (the same effect key)
//! and completes. Between the two, the clock moves to the moment the job is due again
//! and the effect keys past their window are purged, as the worker's purger would. The
//! effect table has no uniqueness, so a second effect shows as a second row.
//!
//! The delays attacked: a handler-chosen `retry_after` and a snooze (DESIGN.md section 7:
//! both have configured maxima that count in the horizon), an operator's retry of a dead
//! job (refused when it would outlive the effect-key window, unless forced), and a job
//! whose kind no running worker knows, which waits for one (section 7: it waits and
//! uses no attempt). The purge keeps the effect keys of a job that may run again, which
//! covers these four.
//!
//! The last case needs more: a job snoozed past its enqueue-key window while the
//! producer re-sends the request. The key lapses while the first job still waits, the
//! re-sent request becomes a second job that makes the effect, and the first one, waking
//! after that job's effect key has passed its own window, makes it again. It fails until
//! snoozes (and `retry_after`) are capped and counted in the horizon as section 7 says,
//! or an enqueue key is kept while its job is unfinished. Time is injected; every wait is
//! on a signal or a state.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use idem::retry::RetryLadder;
use idem::{
    EffectClass, Handler, Idem, Job, JobContext, JobError, JobRow, JobState, ManualClock,
    PurgeTarget, WorkerConfig, WorkerHandle,
};
use idem_store_tests::{TestDb, harness::within};
use tokio::sync::mpsc;

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// The kind every case enqueues.
const KIND: &str = "two-step";

/// How the first attempt ends after committing its effect.
#[derive(Clone, Copy, Debug)]
enum FirstEnd {
    /// `JobError::retry_after(delay)`.
    RetryAfter(Duration),
    /// `JobError::snooze(delay)`.
    Snooze(Duration),
    /// `JobError::permanent`: the job is dead.
    Permanent,
    /// `JobError::retry`: along the worker's ladder.
    Retry,
}

/// Commits its effect, then ends as `first` on its first attempt; makes the effect
/// (again, if its key is gone) and completes on every later one. Sends `(fence, new)`
/// for each effect transaction it committed.
struct TwoStep {
    first: FirstEnd,
    ran: mpsc::UnboundedSender<(i64, bool)>,
}

impl Handler for TwoStep {
    const KIND: &'static str = KIND;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let lease = cx.lease();
        let first = earlier_claims(cx) == 0;
        let mut tx = cx.begin().await?;
        let new = write_effect(&mut tx, lease, "w").await?;
        if first {
            tx.commit().await?;
            let _ = self.ran.send((lease.fence, new));
            return Err(match self.first {
                FirstEnd::RetryAfter(d) => JobError::retry_after(d, "the remote said later"),
                FirstEnd::Snooze(d) => JobError::snooze(d),
                FirstEnd::Permanent => JobError::permanent("step two cannot succeed"),
                FirstEnd::Retry => JobError::retry("step two failed"),
            });
        }
        tx.complete().await?;
        let _ = self.ran.send((lease.fence, new));
        Ok(())
    }
}

/// Whether this claim follows an earlier one of the same job: the fence counts claims
/// (a snooze gives its attempt back, so the attempt number cannot tell).
fn earlier_claims(cx: &JobContext) -> i64 {
    cx.job().fence - 1
}

/// A worker of queue "q" running [`TwoStep`]; the purger off (the cases purge by hand).
fn start(idem: &Idem, first: FirstEnd, ran: mpsc::UnboundedSender<(i64, bool)>) -> WorkerHandle {
    let mut cfg: WorkerConfig = config("q", 1);
    cfg.purge_interval = None;
    cfg.ladder = RetryLadder::new(vec![HOUR]).jitter(0.0);
    let mut w = idem.worker(cfg).unwrap();
    w.register(TwoStep { first, ran }).unwrap();
    w.start()
}

/// A client on a manual clock at the database's time, with the default retention, and
/// its effect table.
async fn setup(db: &TestDb) -> (Idem, Arc<ManualClock>) {
    let clock = Arc::new(db_clock(db).await);
    let idem = client(db, Some(clock.clone()));
    create_effect_table(&idem).await;
    (idem, clock)
}

/// Enqueues the job and lets `first`'s first attempt commit its effect and end; returns
/// the job as that left it, and the events of later attempts.
async fn first_attempt(
    idem: &Idem,
    first: FirstEnd,
) -> (
    i64,
    JobRow,
    WorkerHandle,
    mpsc::UnboundedReceiver<(i64, bool)>,
) {
    let (ran, mut runs) = events();
    let w = start(idem, first, ran);
    let id = idem
        .enqueue(Job::new(KIND, serde_json::json!({})).queue("q"))
        .await
        .unwrap()
        .id;
    let made = within(30, "the first attempt", runs.recv()).await;
    assert_eq!(made, Some((1, true)), "the first attempt made the effect");
    let row = until(idem, id, "the first attempt recorded", |j| {
        j.state != JobState::Running
    })
    .await;
    (id, row, w, runs)
}

/// Moves `clock` to `when` (never back).
fn move_to(clock: &ManualClock, when: idem::Timestamp) {
    let by = (when - clock.get()).to_std().unwrap_or_default();
    clock.advance(by);
}

/// Purges the effect keys past their window now, as the purger would.
async fn purge_effect_keys(idem: &Idem) {
    idem.purge(PurgeTarget::EffectKeys, 1000, |_| {})
        .await
        .expect("purge effect keys");
}

/// Lets the job run again at the time it is due, after a purge at that time; asserts
/// that the effect happened once.
async fn run_again_when_due(
    idem: &Idem,
    clock: &ManualClock,
    id: i64,
    due: idem::Timestamp,
    w: WorkerHandle,
    mut runs: mpsc::UnboundedReceiver<(i64, bool)>,
) {
    move_to(clock, due);
    purge_effect_keys(idem).await;
    let again = within(30, "the job runs again", runs.recv()).await;
    until(idem, id, "completed", |j| j.state == JobState::Completed).await;
    within(30, "shutdown", w.shutdown()).await;
    let rows = effects(idem).await;
    assert_eq!(
        rows.len(),
        1,
        "the effect happened twice ({rows:?}; the later attempt saw its key as new: \
         {again:?}): the job ran again {} after its first attempt, past the effect-key \
         window of {}",
        idem::config::human(due_after(clock, idem, id).await),
        idem::config::human(idem.retention().effect_keys),
    );
}

/// How long after the job's creation the clock stands now.
async fn due_after(clock: &ManualClock, idem: &Idem, id: i64) -> Duration {
    let created = job(idem, id).await.created_at;
    (clock.get() - created).to_std().unwrap_or_default()
}

/// A handler asks to be retried in 4 days, past the 3-day effect-key window. DESIGN.md
/// section 7: a handler-chosen `retry_after` has a configured maximum that counts in the
/// horizon, so the retry comes while the first attempt's key is kept.
async fn a_late_retry_after_makes_its_effect_once(db: &TestDb) {
    let (idem, clock) = setup(db).await;
    let (id, row, w, runs) = first_attempt(&idem, FirstEnd::RetryAfter(4 * DAY)).await;
    assert_eq!(row.state, JobState::Retryable);
    run_again_when_due(&idem, &clock, id, row.run_at, w, runs).await;
}

/// The same with a snooze of 4 days (section 7: snoozes have a configured maximum and a
/// maximum count, in the horizon).
async fn a_late_snooze_makes_its_effect_once(db: &TestDb) {
    let (idem, clock) = setup(db).await;
    let (id, row, w, runs) = first_attempt(&idem, FirstEnd::Snooze(4 * DAY)).await;
    assert_eq!(row.state, JobState::Scheduled);
    run_again_when_due(&idem, &clock, id, row.run_at, w, runs).await;
}

/// A dead job is kept 7 days, its effect keys 3. An operator's retry on day 4 either is
/// refused (section 7: "an operator retry that would outlive the effect-key window is
/// refused unless forced, with the numbers") or must not repeat the effect.
async fn an_operator_retry_past_the_effect_window_makes_its_effect_once(db: &TestDb) {
    let (idem, clock) = setup(db).await;
    let (id, row, w, runs) = first_attempt(&idem, FirstEnd::Permanent).await;
    assert_eq!(row.state, JobState::Dead);
    clock.advance(4 * DAY);
    purge_effect_keys(&idem).await;
    let retried = idem.retry_jobs(vec![id]).await;
    match retried {
        Err(_) => {
            within(30, "shutdown", w.shutdown()).await;
            return; // refused: nothing runs again
        }
        Ok(rows) if rows.is_empty() => {
            within(30, "shutdown", w.shutdown()).await;
            return;
        }
        Ok(_) => {}
    }
    let now = clock.get();
    run_again_when_due(&idem, &clock, id, now, w, runs).await;
}

/// A job failed after committing its effect and waits for its retry while no running
/// worker knows its kind (a deploy that dropped the handler, or every worker of the kind
/// stopped), which section 7 lets it do without spending attempts. When a worker with the
/// kind comes back after the effect-key window, the retry must not repeat the effect.
async fn a_retry_waiting_for_its_kind_past_the_window_makes_its_effect_once(db: &TestDb) {
    let (idem, clock) = setup(db).await;
    let (id, row, w, mut runs) = first_attempt(&idem, FirstEnd::Retry).await;
    assert_eq!(row.state, JobState::Retryable);
    within(30, "the worker with the kind stops", w.shutdown()).await;
    clock.advance(4 * DAY);
    let still = job(&idem, id).await;
    assert_eq!(
        (still.state, still.attempt),
        (JobState::Retryable, 1),
        "the job waited"
    );
    purge_effect_keys(&idem).await;
    let (ran, runs_again) = events();
    drop(std::mem::replace(&mut runs, runs_again));
    let w = start(&idem, FirstEnd::Retry, ran);
    let now = clock.get();
    run_again_when_due(&idem, &clock, id, now, w, runs).await;
}

/// The receipt of an order: snoozes for `snooze` on its job's first claim when asked to
/// (before making anything), then makes the order's receipt (effect key
/// `receipt:{order}`, the same for every job of the order) and completes. Sends the
/// job id for each receipt transaction it committed.
struct Receipt {
    snooze: Duration,
    ran: mpsc::UnboundedSender<i64>,
}

#[derive(serde::Deserialize)]
struct Order {
    order: i64,
    snooze_first: bool,
}

impl Handler for Receipt {
    const KIND: &'static str = "receipt";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = Order;

    async fn run(&self, cx: &mut JobContext, o: Order) -> Result<(), JobError> {
        let lease = cx.lease();
        if o.snooze_first && lease.fence == 1 {
            return Err(JobError::snooze(self.snooze));
        }
        let mut tx = cx.begin().await?;
        let key = idem::EffectKey::new("receipt").part(o.order);
        if tx.claim_effect(&key).await?.is_new() {
            let sql = "INSERT INTO test_effect (job_id, fence, worker) VALUES ($1, $2, $3)";
            let args = [lease.job_id.into(), lease.fence.into(), "w".into()];
            tx.execute(sql, &args).await?;
        }
        tx.complete().await?;
        let _ = self.ran.send(lease.job_id);
        Ok(())
    }
}

/// A request's job snoozes (before making its effect) for longer than the enqueue-key
/// window; the producer re-sends the request once the window has passed since the
/// key was taken, and the re-sent job makes the receipt; later the first job wakes up,
/// after the re-sent job's effect key has passed its own window. The receipt must be
/// made once. DESIGN.md section 7: snoozes have a configured maximum in the horizon, so
/// the first job runs (and makes the receipt) before its key lapses; or the key of a job
/// still waiting must not go to a second job.
async fn a_request_resent_while_its_job_snoozes_past_the_window_makes_its_effect_once(db: &TestDb) {
    let (idem, clock) = setup(db).await;
    let (ran, mut receipts) = events();
    let mut cfg: WorkerConfig = config("q", 2);
    cfg.purge_interval = None;
    let mut w = idem.worker(cfg).unwrap();
    w.register(Receipt {
        snooze: 7 * DAY,
        ran,
    })
    .unwrap();
    let w = w.start();
    let request = |snooze_first: bool| {
        Job::new(
            "receipt",
            serde_json::json!({"order": 7, "snooze_first": snooze_first}),
        )
        .queue("q")
        .enqueue_key("order:7:receipt")
    };
    let first = idem.enqueue(request(true)).await.unwrap().job;
    let snoozed = until(&idem, first.id, "the first job snoozes", |j| {
        j.state == JobState::Scheduled
    })
    .await;
    clock.advance(idem.retention().enqueue_keys + Duration::from_secs(1));
    let resent = idem.enqueue(request(false)).await.unwrap();
    if !resent.deduplicated {
        // The clock now also passed the first job's snooze: the worker's poll may start
        // it before the re-sent job, and then the first job makes the receipt.
        let made = within(30, "the re-sent job's receipt", receipts.recv()).await;
        assert!(
            made == Some(resent.job.id) || made == Some(first.id),
            "{made:?}"
        );
        until(&idem, resent.job.id, "the re-sent job completes", |j| {
            j.state == JobState::Completed
        })
        .await;
    }
    move_to(&clock, snoozed.run_at);
    for target in PurgeTarget::ALL {
        idem.purge(target, 1000, |_| {}).await.expect("purge");
    }
    until(&idem, first.id, "the first job completes", |j| {
        j.state == JobState::Completed
    })
    .await;
    within(30, "shutdown", w.shutdown()).await;
    let rows = effects(&idem).await;
    assert_eq!(
        rows.len(),
        1,
        "two receipts for one order ({rows:?}): the first job, snoozed for 7 days, still \
         waited when its enqueue key lapsed after {}; the re-sent request became job {} \
         (deduplicated: {}), and by the time the first job ran the re-sent job's effect \
         key was past its window",
        idem::config::human(idem.retention().enqueue_keys),
        resent.job.id,
        resent.deduplicated,
    );
}

idem_store_tests::store_cases!(
    a_late_retry_after_makes_its_effect_once,
    a_late_snooze_makes_its_effect_once,
    an_operator_retry_past_the_effect_window_makes_its_effect_once,
    a_retry_waiting_for_its_kind_past_the_window_makes_its_effect_once,
    a_request_resent_while_its_job_snoozes_past_the_window_makes_its_effect_once,
);
