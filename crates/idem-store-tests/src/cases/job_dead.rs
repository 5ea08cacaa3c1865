//! Snooze, and the operator's dead-letter operations: a snooze schedules the job again
//! with its attempt given back, counts itself on the job and never makes it dead;
//! `job_retry` puts a dead or cancelled job back to `available` with a fresh ladder and
//! no snoozes, keeping its history and fence;
//! `job_discard` deletes a dead job with its history and its enqueue key. Jobs in any
//! other state are left alone and absent from the result.

use idem_store::{
    AttemptOutcome, AttemptRow, JobDiscard, JobFail, JobRetry, JobRow, JobState, LeaseToken,
    NewJob, StoreResult, Timestamp,
};

use super::enqueue_key::{enqueue_one, keyed};
use crate::TestDb;
use crate::fixture::{
    assert_lease_lost, at, attempts, cancel, claim, complete, fail, get, ids, insert_one, job,
    job_in, reclaimed, running, t0,
};

/// The error a snooze records.
const SNOOZED: &str = "rate limited, later";

/// Snoozes a claim at `now` for `retry_in_ms`.
async fn snooze(
    db: &TestDb,
    lease: LeaseToken,
    retry_in_ms: i64,
    now: Timestamp,
) -> StoreResult<JobRow> {
    let params = JobFail {
        lease,
        error: SNOOZED.to_owned(),
        retry_in_ms: Some(retry_in_ms),
        snooze: true,
        now: Some(now),
    };
    db.store.job_fail(params).await
}

/// A dead job of `queue`: claimed at [`t0`] and failed without a delay at `at(1)`.
async fn dead_in(db: &TestDb, queue: &str) -> JobRow {
    let row = running(db, job_in(queue, "doomed"), t0()).await;
    fail(db, row.lease_token(), None, at(1))
        .await
        .expect("fail to dead")
}

/// Retries `ids` at `now`; the rows changed, sorted by id.
async fn retry(db: &TestDb, ids: Vec<i64>, now: Timestamp) -> Vec<JobRow> {
    let params = JobRetry {
        ids,
        now: Some(now),
    };
    let mut rows = db.store.job_retry(params).await.expect("job_retry");
    rows.sort_by_key(|j| j.id);
    rows
}

/// Discards `ids`; the ids deleted, sorted.
async fn discard(db: &TestDb, ids: Vec<i64>) -> Vec<i64> {
    let mut out = db
        .store
        .job_discard(JobDiscard { ids })
        .await
        .expect("job_discard");
    out.sort_unstable();
    out
}

/// Every job of `jobs` and its attempts, as stored now.
async fn snapshot(db: &TestDb, jobs: &[&JobRow]) -> Vec<(JobRow, Vec<AttemptRow>)> {
    let mut out = Vec::new();
    for j in jobs {
        out.push((get(db, j.id).await, attempts(db, j.id).await));
    }
    out
}

/// A snooze: `scheduled` at `now + delay` with the claim's attempt given back, fence
/// kept, no lease, not finalized, and a `snoozed` attempt row with the message, numbered
/// as the claim ran; the job is claimed again once `run_at` is reached, under a new fence.
pub async fn snooze_gives_the_attempt_back(db: &TestDb) {
    let row = running(db, job("polite"), t0()).await;
    assert_eq!((row.attempt, row.fence), (1, 1));
    let snoozed = snooze(db, row.lease_token(), 60_000, at(2_000))
        .await
        .expect("snooze");
    assert_eq!(
        (snoozed.state, snoozed.attempt, snoozed.fence),
        (JobState::Scheduled, 0, 1)
    );
    assert_eq!(snoozed.run_at, at(62_000));
    assert_eq!(
        (snoozed.lease_expires_at, snoozed.finalized_at),
        (None, None)
    );
    assert_eq!(get(db, row.id).await, snoozed, "stored row");
    let expected = AttemptRow {
        job_id: row.id,
        attempt: 1,
        fence: 1,
        outcome: AttemptOutcome::Snoozed,
        error: Some(SNOOZED.to_owned()),
        started_at: row.attempted_at,
        finished_at: at(2_000),
    };
    assert_eq!(attempts(db, row.id).await, vec![expected]);
    assert!(claim(db, "default", 1, at(61_999)).await.is_empty());
    let again = claim(db, "default", 1, at(62_000)).await;
    assert_eq!(ids(&again), vec![row.id]);
    assert_eq!((again[0].attempt, again[0].fence), (1, 2));
}

/// A snooze of a job on its last allowed attempt is not dead, nor any number of snoozes
/// after it; a real failure then is, and the history shows every claim.
pub async fn snooze_never_makes_the_job_dead(db: &TestDb) {
    let once = NewJob {
        max_attempts: 1,
        ..job("once")
    };
    let mut current = running(db, once, t0()).await;
    for n in 1..=2 {
        let snoozed = snooze(db, current.lease_token(), 1_000, at(n * 10_000))
            .await
            .expect("snooze");
        assert_eq!(
            (snoozed.state, snoozed.attempt, snoozed.finalized_at),
            (JobState::Scheduled, 0, None),
            "snooze {n}"
        );
        current = claim(db, "default", 1, at(n * 10_000 + 1_000))
            .await
            .remove(0);
        assert_eq!((current.attempt, current.fence), (1, n + 1));
    }
    let dead = fail(db, current.lease_token(), Some(0), at(40_000))
        .await
        .expect("fail");
    assert_eq!(
        dead.state,
        JobState::Dead,
        "the one real attempt was the last"
    );
    let history: Vec<_> = attempts(db, current.id)
        .await
        .iter()
        .map(|a| (a.attempt, a.fence, a.outcome))
        .collect();
    let expected = vec![
        (1, 1, AttemptOutcome::Snoozed),
        (1, 2, AttemptOutcome::Snoozed),
        (1, 3, AttemptOutcome::Dead),
    ];
    assert_eq!(history, expected);
}

/// Each snooze counts on its own job (`snoozes` + 1), a failure leaves the count alone,
/// and an operator retry starts the job afresh with none.
pub async fn snooze_counts_per_job_and_retry_resets_the_count(db: &TestDb) {
    let polite = running(db, job_in("p", "polite"), t0()).await;
    let other = running(db, job_in("o", "other"), t0()).await;
    assert_eq!((polite.snoozes, other.snoozes), (0, 0));
    let mut current = polite;
    for n in 1..=2 {
        let snoozed = snooze(db, current.lease_token(), 0, at(n * 1_000))
            .await
            .expect("snooze");
        assert_eq!(snoozed.snoozes, n as i32, "snooze {n}");
        assert_eq!(get(db, snoozed.id).await, snoozed, "stored row");
        current = claim(db, "p", 1, at(n * 1_000)).await.remove(0);
        assert_eq!(current.snoozes, n as i32, "claimed with its count");
    }
    assert_eq!(get(db, other.id).await.snoozes, 0, "another job's count");
    let failed = fail(db, current.lease_token(), Some(0), at(3_000))
        .await
        .expect("fail");
    assert_eq!((failed.state, failed.snoozes), (JobState::Retryable, 2));
    let last = claim(db, "p", 1, at(3_000)).await.remove(0);
    let dead = fail(db, last.lease_token(), None, at(4_000))
        .await
        .expect("fail to dead");
    assert_eq!((dead.state, dead.snoozes), (JobState::Dead, 2));
    let retried = retry(db, vec![dead.id], at(5_000)).await;
    assert_eq!(
        (retried[0].state, retried[0].snoozes),
        (JobState::Available, 0)
    );
    assert_eq!(get(db, dead.id).await.snoozes, 0, "stored count");
}

/// A snooze under a stale fence, or of a job no longer running, is `LeaseLost`; nothing
/// changes.
pub async fn snooze_refuses_a_claim_not_current(db: &TestDb) {
    let current = reclaimed(db, job_in("q1", "retried"), t0()).await;
    let before = snapshot(db, &[&current]).await;
    let stale = LeaseToken {
        fence: 1,
        ..current.lease_token()
    };
    assert_lease_lost(snooze(db, stale, 1_000, at(1_000)).await, stale);
    assert_eq!(snapshot(db, &[&current]).await, before);
    let row = running(db, job_in("q2", "done"), t0()).await;
    complete(db, row.lease_token(), at(1))
        .await
        .expect("complete");
    let done = snapshot(db, &[&row]).await;
    let lease = row.lease_token();
    assert_lease_lost(snooze(db, lease, 1_000, at(2)).await, lease);
    assert_eq!(snapshot(db, &[&row]).await, done);
}

/// Retrying a dead job: `available` at `now`, attempt 0, not finalized, no lease, fence
/// and attempt history kept; its next claim raises the fence and starts a fresh ladder
/// (a failure that would have exhausted the old one is retryable).
pub async fn retry_puts_a_dead_job_back_with_a_fresh_ladder(db: &TestDb) {
    let twice = NewJob {
        max_attempts: 2,
        ..job("twice")
    };
    let first = running(db, twice, t0()).await;
    fail(db, first.lease_token(), Some(0), at(1))
        .await
        .expect("first fail");
    let second = claim(db, "default", 1, at(2)).await.remove(0);
    let dead = fail(db, second.lease_token(), Some(0), at(3))
        .await
        .expect("second fail");
    assert_eq!(
        (dead.state, dead.attempt, dead.fence),
        (JobState::Dead, 2, 2)
    );
    let history = attempts(db, dead.id).await;
    let retried = retry(db, vec![dead.id], at(10_000)).await;
    assert_eq!(ids(&retried), vec![dead.id]);
    let row = &retried[0];
    assert_eq!(
        (row.state, row.attempt, row.fence),
        (JobState::Available, 0, 2)
    );
    assert_eq!((row.run_at, row.finalized_at), (at(10_000), None));
    assert_eq!(row.lease_expires_at, None);
    assert_eq!(
        (&row.kind, &row.queue, &row.args, row.max_attempts),
        (&dead.kind, &dead.queue, &dead.args, dead.max_attempts)
    );
    assert_eq!(&get(db, dead.id).await, row, "stored row");
    assert_eq!(attempts(db, dead.id).await, history, "history kept");
    let again = claim(db, "default", 1, at(10_000)).await.remove(0);
    assert_eq!((again.attempt, again.fence), (1, 3));
    let failed = fail(db, again.lease_token(), Some(0), at(10_001))
        .await
        .expect("fail after retry");
    assert_eq!(failed.state, JobState::Retryable, "a fresh ladder");
    assert_eq!(attempts(db, dead.id).await.len(), history.len() + 1);
}

/// Cancelled jobs are retried too, whether they were cancelled waiting or running; the
/// claim a cancel fenced out stays fenced out.
pub async fn retry_takes_cancelled_jobs(db: &TestDb) {
    let waiting = insert_one(db, job_in("w", "waiting"), t0()).await;
    cancel(db, waiting.id, at(1)).await.expect("cancel waiting");
    let run = running(db, job_in("r", "running"), t0()).await;
    cancel(db, run.id, at(1)).await.expect("cancel running");
    let retried = retry(db, vec![waiting.id, run.id], at(5_000)).await;
    assert_eq!(ids(&retried), vec![waiting.id, run.id]);
    for (row, fence) in retried.iter().zip([0, 1]) {
        assert_eq!(
            (row.state, row.attempt, row.fence),
            (JobState::Available, 0, fence),
            "{}",
            row.kind
        );
        assert_eq!((row.run_at, row.finalized_at), (at(5_000), None));
        assert_eq!(&get(db, row.id).await, row, "stored row of {}", row.kind);
    }
    let old = run.lease_token();
    assert_lease_lost(complete(db, old, at(5_001)).await, old);
    let again = claim(db, "r", 1, at(5_002)).await.remove(0);
    assert_eq!((again.id, again.attempt, again.fence), (run.id, 1, 2));
}

/// Jobs neither dead nor cancelled (completed, running, available, scheduled,
/// retryable) and missing ids are left alone and absent from the result.
pub async fn retry_leaves_other_jobs_alone(db: &TestDb) {
    let dead = dead_in(db, "d").await;
    let done = running(db, job_in("c", "completed"), t0()).await;
    complete(db, done.lease_token(), at(1))
        .await
        .expect("complete");
    let run = running(db, job_in("r", "running"), t0()).await;
    let waiting = insert_one(db, job_in("a", "available"), t0()).await;
    let later = NewJob {
        run_at: Some(at(60_000)),
        ..job_in("s", "scheduled")
    };
    let scheduled = insert_one(db, later, t0()).await;
    let flaky = running(db, job_in("f", "retryable"), t0()).await;
    fail(db, flaky.lease_token(), Some(60_000), at(1))
        .await
        .expect("fail");
    let others = [&done, &run, &waiting, &scheduled, &flaky];
    let before = snapshot(db, &others).await;
    let mut asked: Vec<i64> = others.iter().map(|j| j.id).collect();
    asked.extend([dead.id, dead.id + 1_000]);
    let retried = retry(db, asked, at(5_000)).await;
    assert_eq!(ids(&retried), vec![dead.id], "only the dead job");
    assert_eq!(snapshot(db, &others).await, before, "the others unchanged");
    assert!(retry(db, vec![], at(5_000)).await.is_empty());
}

/// Discarding dead jobs deletes them, their attempt history and their enqueue key: the
/// key is free at once, inside its window.
pub async fn discard_deletes_dead_jobs_with_their_history_and_key(db: &TestDb) {
    let keyed_job = enqueue_one(db, keyed("k", "keyed", "invoice:7"), t0()).await;
    let row = claim(db, "k", 1, t0()).await.remove(0);
    fail(db, row.lease_token(), None, at(1))
        .await
        .expect("fail to dead");
    let plain = dead_in(db, "p").await;
    assert_eq!(attempts(db, keyed_job.job.id).await.len(), 1);
    let gone = discard(db, vec![keyed_job.job.id, plain.id]).await;
    assert_eq!(gone, vec![keyed_job.job.id, plain.id]);
    for id in gone {
        assert_eq!(
            db.store.job_get(id).await.expect("job_get"),
            None,
            "job {id}"
        );
        assert!(attempts(db, id).await.is_empty(), "attempts of job {id}");
    }
    let again = enqueue_one(db, keyed("k", "keyed", "invoice:7"), at(2)).await;
    assert!(!again.deduplicated, "the key went with the job: {again:?}");
    assert_ne!(again.job.id, keyed_job.job.id);
}

/// Discard leaves jobs that are not dead (completed, cancelled, running, available) and
/// their enqueue keys alone; missing ids are absent from the result.
pub async fn discard_leaves_jobs_not_dead_alone(db: &TestDb) {
    let dead = dead_in(db, "d").await;
    let done = enqueue_one(db, keyed("c", "completed", "kept"), t0())
        .await
        .job;
    let lease = claim(db, "c", 1, t0()).await.remove(0).lease_token();
    complete(db, lease, at(1)).await.expect("complete");
    let cancelled = insert_one(db, job_in("x", "cancelled"), t0()).await;
    cancel(db, cancelled.id, at(1)).await.expect("cancel");
    let run = running(db, job_in("r", "running"), t0()).await;
    let waiting = insert_one(db, job_in("a", "available"), t0()).await;
    let others = [&done, &cancelled, &run, &waiting];
    let before = snapshot(db, &others).await;
    let mut asked: Vec<i64> = others.iter().map(|j| j.id).collect();
    asked.extend([dead.id + 1_000, dead.id]);
    assert_eq!(discard(db, asked).await, vec![dead.id], "only the dead job");
    assert_eq!(snapshot(db, &others).await, before, "the others unchanged");
    let again = enqueue_one(db, keyed("c", "completed", "kept"), at(2)).await;
    assert!(again.deduplicated, "the completed job keeps its key");
    assert_eq!(again.job.id, done.id);
    assert!(discard(db, vec![]).await.is_empty());
}
