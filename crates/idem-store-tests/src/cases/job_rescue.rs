//! `job_rescue`: running jobs whose lease expired before `now` go back to `retryable`
//! (or `dead` when their attempts are used up) with a `lease_expired` attempt row; the
//! old claim is thereby fenced out, and the next claim carries the next fence.

use idem_store::{AttemptOutcome, JobClaim, JobRescue, JobRow, JobState, NewJob, Timestamp};

use crate::TestDb;
use crate::fixture::{
    assert_lease_lost, at, attempts, claim, claim_params, complete, fail, get, heartbeat, ids,
    ids_in_state, insert, insert_one, job, job_in, t0,
};

async fn rescue(db: &TestDb, limit: u32, retry_in_ms: i64, now: Timestamp) -> Vec<JobRow> {
    rescue_capped(db, limit, retry_in_ms, None, now).await
}

async fn rescue_capped(
    db: &TestDb,
    limit: u32,
    retry_in_ms: i64,
    max_attempts: Option<i32>,
    now: Timestamp,
) -> Vec<JobRow> {
    let params = JobRescue {
        limit,
        retry_in_ms,
        max_attempts,
        now: Some(now),
    };
    let mut rows = db.store.job_rescue(params).await.expect("job_rescue");
    rows.sort_by_key(|j| j.id);
    rows
}

/// Claims the only claimable job of `queue` at `now` with a lease of `lease_ms`.
async fn running_for(db: &TestDb, job: NewJob, lease_ms: i64, now: Timestamp) -> JobRow {
    let queue = job.queue.clone();
    insert_one(db, job, now).await;
    let params = JobClaim {
        lease_ms,
        ..claim_params(&queue, 1, now)
    };
    db.store
        .job_claim(params)
        .await
        .expect("job_claim")
        .remove(0)
}

/// Only expired leases are rescued: to `retryable` at `now + retry_in_ms`, or to `dead`
/// when no attempt is left; each with a `lease_expired` attempt row. Live leases and
/// waiting jobs are untouched.
pub async fn rescue_moves_expired_leases_back(db: &TestDb) {
    let expired = running_for(db, job_in("a", "expired"), 10_000, t0()).await;
    let live = running_for(db, job_in("b", "live"), 60_000, t0()).await;
    let last = running_for(
        db,
        NewJob {
            max_attempts: 1,
            ..job_in("c", "last")
        },
        10_000,
        t0(),
    )
    .await;
    let waiting = insert_one(db, job_in("d", "waiting"), t0()).await;
    let rescued = rescue(db, 100, 1_000, at(30_000)).await;
    assert_eq!(ids(&rescued), vec![expired.id, last.id]);
    let retry = get(db, expired.id).await;
    assert_eq!(
        (retry.state, retry.run_at, retry.fence),
        (JobState::Retryable, at(31_000), 1)
    );
    assert_eq!((retry.lease_expires_at, retry.finalized_at), (None, None));
    assert!(
        retry
            .last_error
            .as_deref()
            .is_some_and(|e| e.starts_with(idem_store::RESCUE_ERROR_PREFIX)),
        "a rescued job says why, as the queue-wait metric recognises: {:?}",
        retry.last_error
    );
    let dead = get(db, last.id).await;
    assert_eq!(
        (dead.state, dead.finalized_at),
        (JobState::Dead, Some(at(30_000)))
    );
    assert_eq!(
        rescued,
        vec![retry, dead],
        "rescue returns the rows as stored"
    );
    assert_eq!(get(db, live.id).await, live);
    assert_eq!(get(db, waiting.id).await, waiting);
    for job in [&expired, &last] {
        let rows = attempts(db, job.id).await;
        assert_eq!(rows.len(), 1, "attempts of job {}: {rows:?}", job.id);
        let a = &rows[0];
        assert_eq!(
            (a.attempt, a.fence, a.outcome),
            (1, 1, AttemptOutcome::LeaseExpired)
        );
        assert_eq!((a.started_at, a.finished_at), (Some(t0()), at(30_000)));
    }
}

/// A rescued job keeps its place in claim order (its priority and `run_at`): the next
/// claim takes it before jobs enqueued after it, however long their wait.
pub async fn rescue_keeps_the_job_s_place(db: &TestDb) {
    let lost = running_for(db, job("lost"), 10_000, t0()).await;
    let younger = insert(db, (0..3).map(|i| job(&format!("y{i}"))).collect(), at(1)).await;
    let rescued = rescue(db, 10, 0, at(30_000)).await;
    assert_eq!(ids(&rescued), vec![lost.id]);
    assert_eq!(
        (rescued[0].state, rescued[0].run_at),
        (JobState::Retryable, lost.run_at),
        "rescued with its run_at"
    );
    let next = claim(db, "default", 2, at(30_000)).await;
    assert_eq!(
        ids(&next),
        vec![lost.id, younger[0].id],
        "the rescued job first, then the oldest waiting one"
    );
}

/// A lease is expired only strictly after `lease_expires_at`.
pub async fn rescue_waits_until_the_lease_has_expired(db: &TestDb) {
    let row = running_for(db, job("edge"), 10_000, t0()).await;
    assert!(
        rescue(db, 10, 0, at(9_999)).await.is_empty(),
        "rescued before expiry"
    );
    assert!(
        rescue(db, 10, 0, at(10_000)).await.is_empty(),
        "rescued at expiry"
    );
    assert_eq!(ids(&rescue(db, 10, 0, at(10_001)).await), vec![row.id]);
}

/// One call rescues at most `limit` jobs; later calls take the rest.
pub async fn rescue_respects_the_limit(db: &TestDb) {
    insert(db, (0..5).map(|i| job(&format!("j{i}"))).collect(), t0()).await;
    assert_eq!(claim(db, "default", 5, t0()).await.len(), 5);
    let later = at(3_600_000);
    for expected in [2, 2, 1, 0] {
        assert_eq!(rescue(db, 2, 0, later).await.len(), expected);
    }
    assert!(rescue(db, 0, 0, later).await.is_empty());
    assert_eq!(ids_in_state(db, JobState::Retryable).await.len(), 5);
}

/// After a rescue the old claim can neither complete, fail, heartbeat nor lock; the next
/// claim carries fence + 1 and attempt + 1 and completes normally.
pub async fn rescue_fences_out_the_old_claim(db: &TestDb) {
    let old = running_for(db, job("paused"), 10_000, t0()).await;
    rescue(db, 10, 0, at(60_000)).await;
    let lease = old.lease_token();
    assert_lease_lost(complete(db, lease, at(60_001)).await, lease);
    assert_lease_lost(fail(db, lease, Some(0), at(60_001)).await, lease);
    assert!(
        heartbeat(db, vec![lease], 10_000, at(60_001))
            .await
            .is_empty()
    );
    let mut tx = db.store.begin().await.expect("begin");
    assert_lease_lost(tx.job_lock(idem_store::JobLock::of(lease)).await, lease);
    tx.rollback().await.expect("rollback");
    let next = claim(db, "default", 1, at(60_000)).await.remove(0);
    assert_eq!((next.id, next.attempt, next.fence), (old.id, 2, 2));
    complete(db, next.lease_token(), at(61_000))
        .await
        .expect("the new claim completes");
    let history: Vec<_> = attempts(db, old.id)
        .await
        .iter()
        .map(|a| (a.fence, a.outcome))
        .collect();
    assert_eq!(
        history,
        vec![
            (1, AttemptOutcome::LeaseExpired),
            (2, AttemptOutcome::Completed)
        ]
    );
}

/// Nothing to rescue when no job is running, whatever the clock says.
pub async fn rescue_ignores_jobs_not_running(db: &TestDb) {
    let jobs = insert(db, (0..3).map(|i| job(&format!("j{i}"))).collect(), t0()).await;
    let claimed = claim(db, "default", 2, t0()).await;
    complete(db, claimed[0].lease_token(), at(1))
        .await
        .expect("complete");
    fail(db, claimed[1].lease_token(), Some(1_000), at(1))
        .await
        .expect("fail");
    let scheduled = insert_one(
        db,
        NewJob {
            run_at: Some(at(5_000)),
            ..job("later")
        },
        t0(),
    )
    .await;
    assert!(rescue(db, 100, 0, at(86_400_000)).await.is_empty());
    assert_eq!(get(db, jobs[2].id).await.state, JobState::Available);
    assert_eq!(get(db, scheduled.id).await.state, JobState::Scheduled);
}

/// A cap on attempts makes a job dead at the cap even when its own `max_attempts` is
/// higher; a job whose own limit is lower keeps it; a job under both is retried.
pub async fn rescue_applies_a_cap_on_attempts(db: &TestDb) {
    let many = |queue: &str, n: i32| NewJob {
        max_attempts: n,
        ..job_in(queue, "capped")
    };
    let over_cap = running_for(db, many("a", 20), 10_000, t0()).await;
    let rescued = rescue_capped(db, 100, 0, Some(1), at(30_000)).await;
    assert_eq!(ids(&rescued), vec![over_cap.id]);
    assert_eq!(
        get(db, over_cap.id).await.state,
        JobState::Dead,
        "capped at 1"
    );
    // Under a cap of 5: a job whose own limit is 1 is dead after its one attempt (the
    // lower of the two counts), a job allowed 20 is retried.
    let own_limit = running_for(db, many("b", 1), 10_000, at(30_000)).await;
    let under = running_for(db, many("c", 20), 10_000, at(30_000)).await;
    let rescued = rescue_capped(db, 100, 0, Some(5), at(60_000)).await;
    assert_eq!(ids(&rescued), vec![own_limit.id, under.id]);
    assert_eq!(get(db, own_limit.id).await.state, JobState::Dead);
    assert_eq!(
        get(db, under.id).await.state,
        JobState::Retryable,
        "1 attempt of 5"
    );
}
