//! Retry ladders, snooze, dead-letter promotion and operator retry, enqueue keys through
//! the client, retention checked against the retry horizon, and the worker's purger, on
//! both stores. Every time rule runs on an injected clock: a test moves time forward and
//! waits for the job's state to follow.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use common::*;
use idem::config::human;
use idem::retry::RetryLadder;
use idem::{
    AttemptOutcome, DEFAULT_RETENTION, DeadFilter, EffectClass, HORIZON_MARGIN, Handler, Idem, Job,
    JobContext, JobError, JobRow, JobState, ManualClock, Retention, WorkerConfig,
};
use idem_store_tests::{TestDb, harness::within};
use tokio::sync::mpsc;

const SECOND: Duration = Duration::from_secs(1);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// A ladder without jitter, so each delay is exact.
fn exact(rungs: &[u64]) -> RetryLadder {
    RetryLadder::new(
        rungs
            .iter()
            .map(|s| Duration::from_secs(*s))
            .collect::<Vec<_>>(),
    )
    .jitter(0.0)
}

/// A client on a manual clock standing at the database's time.
async fn manual(db: &TestDb) -> (Idem, Arc<ManualClock>) {
    let clock = Arc::new(db_clock(db).await);
    (client(db, Some(clock.clone())), clock)
}

/// Enqueues a job of `kind` on queue `q` with `max_attempts`; its id.
async fn enqueue_q(idem: &Idem, kind: &str, max_attempts: i32) -> i64 {
    let job = Job::new(kind, serde_json::json!({}))
        .queue("q")
        .max_attempts(max_attempts);
    idem.enqueue(job).await.unwrap().id
}

/// `(attempt, fence, outcome)` of each finished attempt of job `id`, oldest first.
async fn outcomes(idem: &Idem, id: i64) -> Vec<(i32, i64, AttemptOutcome)> {
    let history = idem.attempts(id).await.unwrap();
    history
        .iter()
        .map(|a| (a.attempt, a.fence, a.outcome))
        .collect()
}

/// Fails while `failing` is set (sending each attempt number first), then completes.
struct Failing {
    failing: Arc<AtomicBool>,
    attempts: mpsc::UnboundedSender<i32>,
}

impl Handler for Failing {
    const KIND: &'static str = "failing";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let attempt = cx.job().attempt;
        let _ = self.attempts.send(attempt);
        if self.failing.load(Ordering::SeqCst) {
            return Err(JobError::retry(format!("failed attempt {attempt}")));
        }
        Ok(())
    }
}

/// A job failing every time walks its kind's ladder (not the default one), one rung per
/// attempt, lands in `dead` with every attempt recorded, and an operator retry from dead
/// runs it again with a fresh ladder and the history kept.
async fn failing_job_walks_the_ladder_to_dead_and_back(db: &TestDb) {
    let (idem, clock) = manual(db).await;
    let mut cfg = config("q", 1);
    cfg.ladder = exact(&[3600]);
    cfg.kind_ladders
        .insert("failing".into(), exact(&[10, 20, 30]));
    let failing = Arc::new(AtomicBool::new(true));
    let (tx, mut attempts) = events();
    let mut w = idem.worker(cfg).unwrap();
    w.register(Failing {
        failing: failing.clone(),
        attempts: tx,
    })
    .unwrap();
    let job_id = enqueue_q(&idem, "failing", 4).await;
    let w = w.start();
    for (attempt, rung) in [(1, 10), (2, 20), (3, 30)] {
        assert_eq!(within(30, "attempt", attempts.recv()).await, Some(attempt));
        let row = until(&idem, job_id, "retryable", |j| {
            j.state == JobState::Retryable
        })
        .await;
        let wait = row.run_at - clock.get();
        assert_eq!(
            wait.num_seconds(),
            rung,
            "attempt {attempt} waits rung {rung}"
        );
        assert_eq!(
            row.last_error.as_deref(),
            Some(&*format!("failed attempt {attempt}"))
        );
        clock.advance(SECOND * rung as u32);
    }
    assert_eq!(within(30, "last attempt", attempts.recv()).await, Some(4));
    let dead = until(&idem, job_id, "dead", |j| j.state == JobState::Dead).await;
    assert_eq!((dead.attempt, dead.fence), (4, 4));
    let history = idem.attempts(job_id).await.unwrap();
    assert!(history.iter().all(|a| a.error.is_some()));
    let outcomes = outcomes(&idem, job_id).await;
    use AttemptOutcome::{Dead, Retryable};
    assert_eq!(
        outcomes,
        vec![
            (1, 1, Retryable),
            (2, 2, Retryable),
            (3, 3, Retryable),
            (4, 4, Dead)
        ]
    );

    failing.store(false, Ordering::SeqCst);
    let retried = idem.retry_jobs(vec![job_id]).await.unwrap();
    assert_eq!(retried.len(), 1);
    assert_eq!(
        (retried[0].state, retried[0].attempt),
        (JobState::Available, 0)
    );
    assert_eq!(within(30, "rerun", attempts.recv()).await, Some(1));
    let done = until(&idem, job_id, "completed", |j| {
        j.state == JobState::Completed
    })
    .await;
    assert_eq!(
        (done.attempt, done.fence),
        (1, 5),
        "fresh ladder, fence kept growing"
    );
    let history = idem.attempts(job_id).await.unwrap();
    assert_eq!(history.len(), 5, "history kept across the retry");
    assert_eq!(history[4].outcome, AttemptOutcome::Completed);
    within(30, "shutdown", w.shutdown()).await;
}

/// A worker's `max_attempts` caps a job enqueued with more, so the retry horizon the
/// retention was checked against holds; a permanent error goes to dead at once.
async fn worker_max_attempts_caps_jobs_and_permanent_errors_are_dead(db: &TestDb) {
    let (idem, _clock) = manual(db).await;
    let mut cfg = config("q", 2);
    cfg.ladder = exact(&[0]);
    cfg.max_attempts = 2;
    let (tx, _attempts) = events();
    let mut w = idem.worker(cfg).unwrap();
    w.register(Failing {
        failing: Arc::new(AtomicBool::new(true)),
        attempts: tx,
    })
    .unwrap();
    w.register(Permanent).unwrap();
    let capped = enqueue_q(&idem, "failing", 20).await;
    let permanent = idem
        .enqueue(Job::new("permanent", serde_json::json!({})).queue("q"))
        .await
        .unwrap()
        .id;
    let w = w.start();
    let row = until(&idem, capped, "capped job dead", |j| {
        j.state == JobState::Dead
    })
    .await;
    assert_eq!(row.attempt, 2);
    let row = until(&idem, permanent, "permanent dead", |j| {
        j.state == JobState::Dead
    })
    .await;
    assert_eq!(row.attempt, 1);
    assert_eq!(row.last_error.as_deref(), Some("card declined"));
    let history = idem.attempts(permanent).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].outcome, AttemptOutcome::Dead);
    within(30, "shutdown", w.shutdown()).await;

    // The bulk forms, by filter: discard the permanent one, retry what is left.
    let only = |kind: &str| DeadFilter {
        kind: Some(kind.into()),
        ..DeadFilter::default()
    };
    assert_eq!(idem.discard_dead(&only("permanent")).await.unwrap(), 1);
    assert!(idem.job(permanent).await.unwrap().is_none());
    assert_eq!(idem.retry_dead(&DeadFilter::default()).await.unwrap(), 1);
    let row = common::job(&idem, capped).await;
    assert_eq!((row.state, row.attempt), (JobState::Available, 0));
    assert!(
        idem.dead_ids(&DeadFilter::default())
            .await
            .unwrap()
            .is_empty()
    );
}

struct Permanent;

impl Handler for Permanent {
    const KIND: &'static str = "permanent";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, _: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        Err(JobError::permanent("card declined"))
    }
}

/// Snoozes on its first run, completes on the next.
struct Snoozer {
    runs: AtomicU32,
}

impl Handler for Snoozer {
    const KIND: &'static str = "snoozer";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, _: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        if self.runs.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(JobError::snooze(Duration::from_secs(60)));
        }
        Ok(())
    }
}

/// A snooze runs the job later without spending an attempt: a job with one attempt
/// snoozes and still completes, and the history shows both claims.
async fn snooze_runs_later_without_spending_an_attempt(db: &TestDb) {
    let (idem, clock) = manual(db).await;
    let mut w = idem.worker(config("q", 1)).unwrap();
    w.register(Snoozer {
        runs: AtomicU32::new(0),
    })
    .unwrap();
    let id = enqueue_q(&idem, "snoozer", 1).await;
    let w = w.start();
    let row = until(&idem, id, "snoozed", |j| j.state == JobState::Scheduled).await;
    assert_eq!(row.attempt, 0, "the attempt was given back");
    assert_eq!((row.run_at - clock.get()).num_seconds(), 60);
    assert_eq!(row.last_error, None, "a snooze is not an error");
    clock.advance(Duration::from_secs(60));
    let row = until(&idem, id, "completed", |j| j.state == JobState::Completed).await;
    assert_eq!((row.attempt, row.fence), (1, 2));
    assert_eq!(
        outcomes(&idem, id).await,
        vec![
            (1, 1, AttemptOutcome::Snoozed),
            (1, 2, AttemptOutcome::Completed)
        ]
    );
    let report = within(30, "shutdown", w.shutdown()).await;
    assert_eq!((report.snoozed, report.completed), (1, 1));
}

/// Through the client: a repeated enqueue key returns the first job, marked
/// deduplicated, inside the window, in a batch and in the caller's transaction; once the
/// window has passed the key enqueues anew.
async fn enqueue_keys_deduplicate_inside_the_window(db: &TestDb) {
    let (idem, clock) = manual(db).await;
    let window = Duration::from_secs(3600);
    let idem = idem
        .with_retention(Retention {
            enqueue_keys: window,
            ..Retention::default()
        })
        .unwrap();
    let keyed = |k: &str| Job::new("mail", serde_json::json!({})).enqueue_key(k);
    let first = idem.enqueue(keyed("order:1")).await.unwrap();
    assert!(!first.deduplicated);
    let again = idem.enqueue(keyed("order:1")).await.unwrap();
    assert!(again.deduplicated);
    assert_eq!(again.job, first.job);

    let batch = idem
        .enqueue_many(vec![keyed("order:1"), keyed("order:2"), keyed("order:2")])
        .await
        .unwrap();
    let flags: Vec<bool> = batch.iter().map(|e| e.deduplicated).collect();
    assert_eq!(flags, vec![true, false, true]);
    assert_eq!(batch[0].id, first.id);
    assert_eq!(batch[1].id, batch[2].id);

    let mut tx = idem.begin().await.unwrap();
    let in_tx = idem.enqueue_tx(&mut tx, keyed("order:2")).await.unwrap();
    tx.commit().await.unwrap();
    assert!(in_tx.deduplicated);
    assert_eq!(in_tx.id, batch[1].id);

    clock.advance(window - Duration::from_millis(1));
    assert!(idem.enqueue(keyed("order:1")).await.unwrap().deduplicated);
    clock.advance(Duration::from_millis(2));
    let waiting = idem.enqueue(keyed("order:1")).await.unwrap();
    assert!(
        waiting.deduplicated,
        "past the window, but its job may still run"
    );
    idem.cancel(first.id).await.unwrap();
    let anew = idem.enqueue(keyed("order:1")).await.unwrap();
    assert!(
        !anew.deduplicated,
        "the window has passed and its job has finished"
    );
    assert_ne!(anew.id, first.id);
    let all = idem.jobs(idem::JobList {
        limit: 100,
        ..Default::default()
    });
    assert_eq!(all.await.unwrap().len(), 3, "order:1 twice, order:2 once");
}

/// A worker refuses to start when a retention window does not cover its retry horizon,
/// naming both durations; handler-chosen delays and snoozes count in the horizon.
async fn retention_shorter_than_the_horizon_is_refused(db: &TestDb) {
    let short = Duration::from_secs(2 * 3600);
    let idem = client(db, None)
        .with_retention(Retention {
            effect_keys: short,
            ..Retention::default()
        })
        .unwrap();
    let cfg = WorkerConfig::default();
    let horizon = cfg.horizon();
    let err = idem.worker(cfg).err().expect("refused").to_string();
    assert!(err.contains(&human(short)), "{err}");
    assert!(err.contains(&human(horizon.total)), "{err}");
    assert!(err.contains("effect"), "{err}");
    let cfg = WorkerConfig {
        ladder: exact(&[60]),
        max_attempts: 3,
        ..WorkerConfig::default()
    };
    let err = idem.worker(cfg.clone()).err().expect("refused").to_string();
    assert!(
        err.contains(&human(cfg.horizon().total)),
        "snoozes count: {err}"
    );
    let cfg = WorkerConfig {
        max_retry_after: 60 * SECOND,
        max_snoozes: 2,
        max_snooze: 60 * SECOND,
        ..cfg
    };
    let fits = idem.worker(cfg).map(|_| ()).map_err(|e| e.to_string());
    assert_eq!(
        fits,
        Ok(()),
        "a short ladder and short handler delays fit the window"
    );
}

/// The worker's purger deletes finished jobs, enqueue keys and effect records past their
/// retention (judged on the injected clock) and keeps everything younger.
async fn the_purger_deletes_only_what_is_past_retention(db: &TestDb) {
    let (idem, clock) = manual(db).await;
    create_effect_table(&idem).await;
    // Windows of 3 days: the test workers' retry horizon (with their 1 h rescue
    // interval) is longer than a day.
    let window = 3 * DAY;
    let idem = idem
        .with_retention(Retention {
            enqueue_keys: window,
            effect_keys: window,
            intents: window,
            finished_jobs: window,
            dead_jobs: window,
            http_keys: window,
        })
        .unwrap();
    let effect_job = |k: &str| Job::new(EFFECT_KIND, serde_json::json!({})).enqueue_key(k);
    let old = run_to_completion(&idem, effect_job("old")).await;
    // The young job finishes a window and a second later and is an hour old when the purger
    // runs: its row, key and effect record are inside every window.
    clock.advance(window + SECOND);
    let young = run_to_completion(&idem, effect_job("young")).await;
    clock.advance(Duration::from_secs(3600));
    let live = idem
        .enqueue(Job::new("nobody-runs-this", serde_json::json!({})).queue("idle"))
        .await
        .unwrap()
        .id;
    let mut cfg = config("idle", 1);
    cfg.purge_interval = Some(Duration::from_millis(20));
    let purger = idem.worker(cfg).unwrap().start();
    within(30, "old job purged", async {
        while idem.job(old).await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    within(30, "shutdown", purger.shutdown()).await;
    assert!(
        idem.attempts(old).await.unwrap().is_empty(),
        "history purged with the job"
    );
    let young = common::job(&idem, young).await;
    assert_eq!(
        young.state,
        JobState::Completed,
        "a young finished job is kept"
    );
    assert_eq!(idem.attempts(young.id).await.unwrap().len(), 1);
    assert!(idem.job(live).await.unwrap().is_some());
    let keys = count(&idem, "SELECT count(*) FROM idem_enqueue_key").await;
    assert_eq!(keys, 1, "only the young key is left");
    let effect_records = count(&idem, "SELECT count(*) FROM idem_effect").await;
    assert_eq!(
        effect_records, 1,
        "the old effect record is past its window, the young one is not"
    );
    assert_eq!(effects(&idem).await.len(), 2, "effect data is never purged");
    let reused = idem.enqueue(effect_job("old")).await.unwrap();
    assert!(!reused.deduplicated, "a purged key is free");
}

/// Enqueues `job` (of the effect kind) and runs it to completion with a worker of its
/// own; the job's id.
async fn run_to_completion(idem: &Idem, job: Job) -> i64 {
    let id = idem.enqueue(job).await.unwrap().id;
    let (done, done_rx) = Once::new();
    let mut w = idem.worker(config("default", 1)).unwrap();
    w.register(WriteEffect { worker: "w", done }).unwrap();
    let w = w.start();
    within(30, "the effect job done", done_rx).await.unwrap();
    within(30, "shutdown", w.shutdown()).await;
    id
}

async fn count(idem: &Idem, sql: &str) -> i64 {
    match idem.store().query(sql, &[]).await.unwrap().as_slice() {
        [row] => match row.as_slice() {
            [idem::SqlValue::Int(n)] => *n,
            other => panic!("unexpected count {other:?}"),
        },
        other => panic!("unexpected rows {other:?}"),
    }
}

/// Asks for a 4-day delay on its first run (sending each run's number first), then
/// completes.
struct RetryInFourDays {
    runs: mpsc::UnboundedSender<i32>,
}

impl Handler for RetryInFourDays {
    const KIND: &'static str = "retry-in-four-days";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let attempt = cx.job().attempt;
        let _ = self.runs.send(attempt);
        if attempt == 1 {
            return Err(JobError::retry_after(4 * DAY, "the partner is closed"));
        }
        Ok(())
    }
}

/// A handler's `retry_after` longer than `max_retry_after` waits `max_retry_after`
/// (default 1 h), not the 4 days it asked for, which would outlive the 3-day effect-key
/// window; the attempt's error says so.
async fn a_long_retry_after_waits_only_max_retry_after(db: &TestDb) {
    let (idem, clock) = manual(db).await;
    let (tx, mut runs) = events();
    let mut w = idem.worker(config("q", 1)).unwrap();
    w.register(RetryInFourDays { runs: tx }).unwrap();
    let id = enqueue_q(&idem, "retry-in-four-days", 3).await;
    let w = w.start();
    assert_eq!(within(30, "first run", runs.recv()).await, Some(1));
    let row = until(&idem, id, "retryable", |j| j.state == JobState::Retryable).await;
    assert_eq!(WorkerConfig::default().max_retry_after, HOUR, "the default");
    assert_eq!((row.run_at - clock.get()).to_std().unwrap(), HOUR);
    let error = row.last_error.unwrap_or_default();
    assert!(
        error.contains("the partner is closed; retry_after 4d clamped to max_retry_after 1h"),
        "{error}"
    );
    assert_eq!(
        idem.attempts(id).await.unwrap()[0].error.as_deref(),
        Some(&*error)
    );
    clock.advance(HOUR);
    assert_eq!(within(30, "second run", runs.recv()).await, Some(2));
    until(&idem, id, "completed", |j| j.state == JobState::Completed).await;
    within(30, "shutdown", w.shutdown()).await;
}

/// Snoozes for 4 days on every run, sending each run's number.
struct AlwaysSnoozes {
    runs: mpsc::UnboundedSender<u32>,
    count: AtomicU32,
}

impl Handler for AlwaysSnoozes {
    const KIND: &'static str = "always-snoozes";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, _: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let _ = self
            .runs
            .send(self.count.fetch_add(1, Ordering::SeqCst) + 1);
        Err(JobError::snooze(4 * DAY))
    }
}

/// Runs the next round of a job whose handler signals each run: waits for run `n`, then
/// for the job to leave `running`; returns the row.
async fn next_round(
    idem: &Idem,
    id: i64,
    runs: &mut mpsc::UnboundedReceiver<u32>,
    n: u32,
) -> JobRow {
    assert_eq!(within(30, "a run", runs.recv()).await, Some(n));
    until(idem, id, "the run recorded", |j| {
        j.state != JobState::Running
    })
    .await
}

/// A handler that always snoozes takes `max_snoozes` snoozes (default 10), each clamped
/// to `max_snooze` (default 1 h); every snooze after that is a failed attempt along the
/// ladder, so the job ends `dead` when its attempts are used up.
async fn a_job_that_always_snoozes_ends_dead(db: &TestDb) {
    let (idem, clock) = manual(db).await;
    let mut cfg = config("q", 1);
    cfg.ladder = exact(&[30]);
    let (tx, mut runs) = events();
    let mut w = idem.worker(cfg).unwrap();
    w.register(AlwaysSnoozes {
        runs: tx,
        count: AtomicU32::new(0),
    })
    .unwrap();
    let id = enqueue_q(&idem, "always-snoozes", 2).await;
    let w = w.start();
    let d = WorkerConfig::default();
    assert_eq!((d.max_snoozes, d.max_snooze), (10, HOUR), "the defaults");
    for n in 1..=10 {
        let row = next_round(&idem, id, &mut runs, n).await;
        assert_eq!(
            (row.state, row.attempt),
            (JobState::Scheduled, 0),
            "snooze {n}"
        );
        assert_eq!(
            (row.run_at - clock.get()).to_std().unwrap(),
            HOUR,
            "snooze {n} clamped"
        );
        clock.advance(HOUR);
    }
    let row = next_round(&idem, id, &mut runs, 11).await;
    assert_eq!(
        (row.state, row.attempt),
        (JobState::Retryable, 1),
        "the 11th snooze failed"
    );
    assert_eq!(
        (row.run_at - clock.get()).to_std().unwrap(),
        30 * SECOND,
        "along the ladder"
    );
    let error = row.last_error.unwrap_or_default();
    assert!(error.contains("max_snoozes 10"), "{error}");
    clock.advance(30 * SECOND);
    let row = next_round(&idem, id, &mut runs, 12).await;
    assert_eq!(
        (row.state, row.attempt, row.snoozes),
        (JobState::Dead, 2, 10)
    );
    let outcomes: Vec<AttemptOutcome> = outcomes(&idem, id).await.iter().map(|o| o.2).collect();
    let mut expected = vec![AttemptOutcome::Snoozed; 10];
    expected.extend([AttemptOutcome::Retryable, AttemptOutcome::Dead]);
    assert_eq!(outcomes, expected);
    within(30, "shutdown", w.shutdown()).await;
}

/// Runs one job of the `permanent` kind to `dead` with a worker of its own; its id.
async fn dead_job(idem: &Idem) -> i64 {
    let mut w = idem.worker(config("q", 1)).unwrap();
    w.register(Permanent).unwrap();
    let id = enqueue_q(idem, "permanent", 3).await;
    let w = w.start();
    until(idem, id, "dead", |j| j.state == JobState::Dead).await;
    within(30, "shutdown", w.shutdown()).await;
    id
}

/// How old a job's first attempt may be for an operator retry without force: the
/// effect-key retention minus the client's retry horizon and the margin.
fn retry_allowance() -> Duration {
    DEFAULT_RETENTION - WorkerConfig::default().horizon().total - HORIZON_MARGIN
}

/// An operator retry of a dead job whose first attempt started longer ago than the
/// effect-key retention minus the retry horizon and the margin is refused, naming the
/// job, both durations and the way out; nothing changes. The forced retry goes through.
async fn an_old_dead_job_is_refused_a_retry(db: &TestDb) {
    let (idem, clock) = manual(db).await;
    let id = dead_job(&idem).await;
    let age = retry_allowance() + Duration::from_secs(60);
    clock.advance(age);
    let err = idem
        .retry_jobs(vec![id])
        .await
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains(&format!("job {id} first ran {} ago", human(age))),
        "{err}"
    );
    assert!(err.contains("effect-key retention 3d"), "{err}");
    let horizon = WorkerConfig::default().horizon().total;
    assert!(
        err.contains(&format!("retry horizon {}", human(horizon))),
        "{err}"
    );
    assert!(err.contains("--force"), "{err}");
    assert_eq!(
        job(&idem, id).await.state,
        JobState::Dead,
        "nothing retried"
    );
    assert_eq!(
        idem.retry_dead(&DeadFilter::default()).await.ok(),
        None,
        "by filter too"
    );
}

/// A dead job whose first attempt is just as old as the allowance retries without
/// force; one a millisecond older in the same call refuses the whole call.
async fn a_young_dead_job_retries_without_force(db: &TestDb) {
    let (idem, clock) = manual(db).await;
    let old = dead_job(&idem).await;
    clock.advance(Duration::from_millis(1));
    let young = dead_job(&idem).await;
    clock.advance(retry_allowance());
    let err = idem
        .retry_jobs(vec![young, old])
        .await
        .expect_err("refused");
    let err = err.to_string();
    assert!(err.contains(&format!("job {old} ")), "{err}");
    assert!(!err.contains(&format!("job {young} ")), "{err}");
    for id in [old, young] {
        assert_eq!(
            job(&idem, id).await.state,
            JobState::Dead,
            "the whole call refused"
        );
    }
    let retried = idem.retry_jobs(vec![young]).await.unwrap();
    assert_eq!(retried.len(), 1);
    assert_eq!(
        (retried[0].id, retried[0].state),
        (young, JobState::Available)
    );
}

idem_store_tests::store_cases!(
    failing_job_walks_the_ladder_to_dead_and_back,
    worker_max_attempts_caps_jobs_and_permanent_errors_are_dead,
    snooze_runs_later_without_spending_an_attempt,
    enqueue_keys_deduplicate_inside_the_window,
    retention_shorter_than_the_horizon_is_refused,
    the_purger_deletes_only_what_is_past_retention,
    a_long_retry_after_waits_only_max_retry_after,
    a_job_that_always_snoozes_ends_dead,
    an_old_dead_job_is_refused_a_retry,
    a_young_dead_job_retries_without_force,
);

/// An operator's retry holds one connection for transactions: its window check reads
/// before the retry's transaction opens, so a client whose pool for transactions holds
/// one connection retries at once instead of waiting on itself for the pool's timeout.
async fn a_retry_needs_one_connection_for_transactions(db: &TestDb) {
    let id = dead_job(&client(db, None)).await;
    assert_eq!(idem_postgres::Budget::of(3).transactions, 1);
    let small = client_with_budget(&db.url, 3).await;
    assert_eq!(small.store().connections(), Some(1));
    let retried = within(5, "a retry on one connection", small.retry_jobs(vec![id])).await;
    assert_eq!(retried.expect("retried").len(), 1);
    small.store().close().await;
}

idem_store_tests::postgres_cases!(a_retry_needs_one_connection_for_transactions);
