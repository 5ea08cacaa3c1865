//! `job_complete` and `job_fail`: guarded by state and fence, they finish the current
//! claim and record its attempt in the same transaction; any other claim is refused with
//! `LeaseLost` and changes nothing.

use idem_store::{AttemptOutcome, AttemptRow, JobRow, JobState, LeaseToken, NewJob};

use crate::TestDb;
use crate::fixture::{
    assert_lease_lost, at, attempts, cancel, claim, complete, fail, get, insert_one, job, job_in,
    outcomes, reclaimed, running, t0,
};

/// The attempt row a claim of `job` (claimed at `started`) leaves when it ends.
fn attempt_of(
    job: &JobRow,
    outcome: AttemptOutcome,
    error: Option<&str>,
    finished: idem_store::Timestamp,
) -> AttemptRow {
    AttemptRow {
        job_id: job.id,
        attempt: job.attempt,
        fence: job.fence,
        outcome,
        error: error.map(str::to_owned),
        started_at: job.attempted_at,
        finished_at: finished,
    }
}

/// Completing the current claim: `completed`, `finalized_at = now`, no lease, and one
/// `completed` attempt row.
pub async fn complete_finishes_the_current_claim(db: &TestDb) {
    let row = running(db, job("done"), t0()).await;
    let done = complete(db, row.lease_token(), at(5_000))
        .await
        .expect("complete");
    assert_eq!(
        (done.state, done.attempt, done.fence),
        (JobState::Completed, 1, 1)
    );
    assert_eq!(done.finalized_at, Some(at(5_000)));
    assert_eq!(done.lease_expires_at, None);
    assert_eq!(get(db, row.id).await, done, "stored row");
    let expected = attempt_of(&row, AttemptOutcome::Completed, None, at(5_000));
    assert_eq!(attempts(db, row.id).await, vec![expected]);
}

/// Completing under an earlier fence of a reclaimed job is `LeaseLost`; nothing changes.
pub async fn complete_refuses_a_stale_fence(db: &TestDb) {
    let current = reclaimed(db, job("retried"), t0()).await;
    let before = attempts(db, current.id).await;
    let stale = LeaseToken {
        fence: 1,
        ..current.lease_token()
    };
    assert_lease_lost(complete(db, stale, at(1_000)).await, stale);
    assert_eq!(get(db, current.id).await, current);
    assert_eq!(attempts(db, current.id).await, before);
}

/// Completing a job that is not running (never claimed, already completed, missing) is
/// `LeaseLost`; nothing changes.
pub async fn complete_refuses_a_job_not_running(db: &TestDb) {
    let waiting = insert_one(db, job_in("q1", "waiting"), t0()).await;
    assert_lease_lost(
        complete(db, waiting.lease_token(), t0()).await,
        waiting.lease_token(),
    );
    assert_eq!(get(db, waiting.id).await, waiting);
    let row = running(db, job_in("q2", "twice"), t0()).await;
    let done = complete(db, row.lease_token(), at(1))
        .await
        .expect("first complete");
    assert_lease_lost(
        complete(db, row.lease_token(), at(2)).await,
        row.lease_token(),
    );
    assert_eq!(
        get(db, row.id).await,
        done,
        "a second completion changes nothing"
    );
    assert_eq!(attempts(db, row.id).await.len(), 1);
    let missing = LeaseToken {
        job_id: row.id + 1_000,
        fence: 1,
    };
    assert_lease_lost(complete(db, missing, t0()).await, missing);
}

/// Completing a claim whose job was cancelled is `LeaseLost`; the job stays cancelled.
pub async fn complete_refuses_after_cancel(db: &TestDb) {
    let row = running(db, job("cancelled"), t0()).await;
    let cancelled = cancel(db, row.id, at(1_000)).await.expect("cancel");
    assert_lease_lost(
        complete(db, row.lease_token(), at(2_000)).await,
        row.lease_token(),
    );
    assert_eq!(get(db, row.id).await, cancelled);
    let outcomes = outcomes(db, row.id).await;
    assert_eq!(outcomes, vec![AttemptOutcome::Cancelled]);
}

/// A failure with a retry delay: `retryable` at `now + delay`, the error kept, no lease,
/// not finalized, and a `retryable` attempt row with the error.
pub async fn fail_with_a_delay_makes_the_job_retryable(db: &TestDb) {
    let row = running(db, job("flaky"), t0()).await;
    let failed = fail(db, row.lease_token(), Some(10_000), at(2_000))
        .await
        .expect("fail");
    assert_eq!(
        (failed.state, failed.attempt, failed.fence),
        (JobState::Retryable, 1, 1)
    );
    assert_eq!(failed.run_at, at(12_000));
    assert_eq!(failed.last_error.as_deref(), Some("boom"));
    assert_eq!((failed.lease_expires_at, failed.finalized_at), (None, None));
    assert_eq!(get(db, row.id).await, failed, "stored row");
    let expected = attempt_of(&row, AttemptOutcome::Retryable, Some("boom"), at(2_000));
    assert_eq!(attempts(db, row.id).await, vec![expected]);
}

/// A failure without a retry delay: `dead`, finalized at `now`, a `dead` attempt row.
pub async fn fail_without_a_delay_makes_the_job_dead(db: &TestDb) {
    let row = running(db, job("broken"), t0()).await;
    let dead = fail(db, row.lease_token(), None, at(3_000))
        .await
        .expect("fail");
    assert_eq!(
        (dead.state, dead.finalized_at),
        (JobState::Dead, Some(at(3_000)))
    );
    assert_eq!(dead.last_error.as_deref(), Some("boom"));
    assert_eq!(dead.lease_expires_at, None);
    assert_eq!(get(db, row.id).await, dead, "stored row");
    let expected = attempt_of(&row, AttemptOutcome::Dead, Some("boom"), at(3_000));
    assert_eq!(attempts(db, row.id).await, vec![expected]);
    assert!(
        claim(db, "default", 10, at(3_600_000)).await.is_empty(),
        "a dead job is claimed"
    );
}

/// A failure of the last allowed attempt is `dead` even with a retry delay.
pub async fn fail_of_the_last_attempt_is_dead(db: &TestDb) {
    let first = running(
        db,
        NewJob {
            max_attempts: 2,
            ..job("twice")
        },
        t0(),
    )
    .await;
    fail(db, first.lease_token(), Some(0), at(1_000))
        .await
        .expect("first fail");
    let second = claim(db, "default", 1, at(1_000)).await.remove(0);
    assert_eq!((second.attempt, second.fence), (2, 2));
    let dead = fail(db, second.lease_token(), Some(60_000), at(2_000))
        .await
        .expect("second fail");
    assert_eq!(
        (dead.state, dead.finalized_at),
        (JobState::Dead, Some(at(2_000)))
    );
    let outcomes: Vec<_> = attempts(db, first.id)
        .await
        .iter()
        .map(|a| (a.attempt, a.outcome))
        .collect();
    assert_eq!(
        outcomes,
        vec![(1, AttemptOutcome::Retryable), (2, AttemptOutcome::Dead)]
    );
}

/// Failing under a stale fence, or a job already finished, is `LeaseLost`; nothing
/// changes.
pub async fn fail_refuses_a_claim_not_current(db: &TestDb) {
    let current = reclaimed(db, job_in("q1", "retried"), t0()).await;
    let before = attempts(db, current.id).await;
    let stale = LeaseToken {
        fence: 1,
        ..current.lease_token()
    };
    assert_lease_lost(fail(db, stale, Some(1_000), at(1_000)).await, stale);
    assert_lease_lost(fail(db, stale, None, at(1_000)).await, stale);
    assert_eq!(get(db, current.id).await, current);
    assert_eq!(attempts(db, current.id).await, before);
    let row = running(db, job_in("q2", "done"), t0()).await;
    let done = complete(db, row.lease_token(), at(1))
        .await
        .expect("complete");
    assert_lease_lost(
        fail(db, row.lease_token(), None, at(2)).await,
        row.lease_token(),
    );
    assert_eq!(get(db, row.id).await, done);
}

/// `job_complete_many` completes every current claim in one call, records one
/// `completed` attempt for each, and leaves out (and does not touch) claims that are not
/// current: a stale fence, a cancelled job, a job never claimed.
pub async fn complete_many_finishes_only_current_claims(db: &TestDb) {
    let a = running(db, job_in("qa", "a"), t0()).await;
    let b = running(db, job_in("qb", "b"), t0()).await;
    let stale = reclaimed(db, job_in("qc", "c"), t0()).await;
    let cancelled = running(db, job_in("qd", "d"), t0()).await;
    cancel(db, cancelled.id, at(1)).await.expect("cancel");
    let waiting = insert_one(db, job_in("qe", "e"), t0()).await;
    let stale_lease = LeaseToken {
        fence: 1,
        ..stale.lease_token()
    };
    let untouched = [
        get(db, stale.id).await,
        get(db, cancelled.id).await,
        waiting.clone(),
    ];
    let leases = vec![
        a.lease_token(),
        stale_lease,
        b.lease_token(),
        cancelled.lease_token(),
        waiting.lease_token(),
    ];
    let params = idem_store::JobCompleteMany {
        results: Vec::new(),
        leases,
        now: Some(at(7_000)),
    };
    let mut done = db
        .store
        .job_complete_many(params)
        .await
        .expect("complete many");
    done.sort_unstable();
    assert_eq!(done, vec![a.id, b.id]);
    for j in [&a, &b] {
        let row = get(db, j.id).await;
        assert_eq!(
            (row.state, row.finalized_at),
            (JobState::Completed, Some(at(7_000)))
        );
        let expected = attempt_of(j, AttemptOutcome::Completed, None, at(7_000));
        assert_eq!(attempts(db, j.id).await, vec![expected]);
    }
    for row in untouched {
        assert_eq!(
            get(db, row.id).await,
            row,
            "a claim not current is untouched"
        );
    }
    let none = idem_store::JobCompleteMany::default();
    assert!(
        db.store
            .job_complete_many(none)
            .await
            .expect("empty")
            .is_empty()
    );
}
