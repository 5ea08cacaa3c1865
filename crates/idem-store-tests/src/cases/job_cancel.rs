//! `job_cancel`: any unfinished job becomes `cancelled` (a running one records a
//! `cancelled` attempt and its claim is fenced out); a finished job is a `Conflict`, a
//! missing one `NotFound`.

use idem_store::{AttemptOutcome, JobCancel, JobRow, JobState, NewJob, StoreError};

use crate::TestDb;
use crate::fixture::{
    assert_lease_lost, assert_waits_for, at, attempts, cancel, claim, claim_params, complete, fail,
    get, heartbeat, insert_one, job, job_in, outcomes, running, spawn_started, t0,
};
use crate::harness::within;

/// Scheduled, available, retryable and running jobs are cancelled at `now`, with no
/// lease left; only the running one records an attempt (`cancelled`, its fence).
pub async fn cancel_stops_unfinished_jobs(db: &TestDb) {
    let scheduled = insert_one(
        db,
        NewJob {
            run_at: Some(at(60_000)),
            ..job_in("s", "s")
        },
        t0(),
    )
    .await;
    let available = insert_one(db, job_in("a", "a"), t0()).await;
    let retryable = running(db, job_in("r", "r"), t0()).await;
    fail(db, retryable.lease_token(), Some(60_000), at(1))
        .await
        .expect("fail");
    let run = running(db, job_in("x", "x"), t0()).await;
    let now = at(5_000);
    for job in [&scheduled, &available, &retryable, &run] {
        let row = cancel(db, job.id, now)
            .await
            .unwrap_or_else(|e| panic!("cancel {}: {e}", job.kind));
        assert_eq!(
            (row.state, row.finalized_at),
            (JobState::Cancelled, Some(now)),
            "{}",
            job.kind
        );
        assert_eq!(row.lease_expires_at, None, "{}", job.kind);
        assert_eq!(get(db, job.id).await, row, "stored row of {}", job.kind);
    }
    assert!(attempts(db, scheduled.id).await.is_empty());
    assert!(attempts(db, available.id).await.is_empty());
    let retried = outcomes(db, retryable.id).await;
    assert_eq!(
        retried,
        vec![AttemptOutcome::Retryable],
        "a waiting job records no attempt"
    );
    let history = attempts(db, run.id).await;
    assert_eq!(history.len(), 1, "{history:?}");
    let a = &history[0];
    assert_eq!(
        (a.attempt, a.fence, a.outcome),
        (1, 1, AttemptOutcome::Cancelled)
    );
    assert_eq!((a.started_at, a.finished_at), (Some(t0()), now));
}

/// Cancelling a running job fences out its claim, and a cancelled job is never claimed.
pub async fn cancel_fences_out_the_running_claim(db: &TestDb) {
    let row = running(db, job("running"), t0()).await;
    let cancelled = cancel(db, row.id, at(1_000)).await.expect("cancel");
    let lease = row.lease_token();
    assert_lease_lost(complete(db, lease, at(2_000)).await, lease);
    assert_lease_lost(fail(db, lease, Some(0), at(2_000)).await, lease);
    assert!(
        heartbeat(db, vec![lease], 30_000, at(2_000))
            .await
            .is_empty()
    );
    assert!(claim(db, "default", 10, at(3_600_000)).await.is_empty());
    assert_eq!(get(db, row.id).await, cancelled);
}

/// Completed, dead and cancelled jobs cannot be cancelled: `Conflict`, nothing changes.
pub async fn cancel_refuses_finished_jobs(db: &TestDb) {
    let done = running(db, job_in("c", "completed"), t0()).await;
    complete(db, done.lease_token(), at(1))
        .await
        .expect("complete");
    let dead = running(db, job_in("d", "dead"), t0()).await;
    fail(db, dead.lease_token(), None, at(1))
        .await
        .expect("fail");
    let gone = insert_one(db, job_in("x", "cancelled"), t0()).await;
    cancel(db, gone.id, at(1)).await.expect("first cancel");
    for job in [&done, &dead, &gone] {
        let before: JobRow = get(db, job.id).await;
        let history = attempts(db, job.id).await;
        let result = cancel(db, job.id, at(2_000)).await;
        assert!(
            matches!(result, Err(StoreError::Conflict(_))),
            "{}: {result:?}",
            job.kind
        );
        assert_eq!(get(db, job.id).await, before, "{} changed", job.kind);
        assert_eq!(
            attempts(db, job.id).await,
            history,
            "{} attempts changed",
            job.kind
        );
    }
}

/// Cancelling a job that does not exist is `NotFound`.
pub async fn cancel_of_a_missing_job_is_not_found(db: &TestDb) {
    let row = insert_one(db, job("exists"), t0()).await;
    let result = cancel(db, row.id + 1_000, at(1)).await;
    assert!(
        matches!(result, Err(StoreError::NotFound { .. })),
        "{result:?}"
    );
    assert_eq!(get(db, row.id).await, row);
}

/// A cancel racing a claim's open transaction waits for it and then cancels what the
/// claim committed: the running job, with a `cancelled` attempt for the claim's fence,
/// which is thereby fenced out.
pub async fn cancel_waits_for_a_concurrent_claim(db: &TestDb) {
    let row = insert_one(db, job("contended"), t0()).await;
    let mut tx = db.store.begin().await.expect("begin");
    let claimed = tx
        .job_claim(claim_params("default", 1, t0()))
        .await
        .expect("claim in tx");
    assert_eq!(claimed.len(), 1);
    let store = db.store.clone();
    let params = JobCancel {
        job_id: row.id,
        now: Some(at(1_000)),
    };
    let racer = spawn_started(async move { store.job_cancel(params).await }).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit the claim");
    let cancelled = within(30, "cancel after the claim", racer)
        .await
        .expect("cancel task")
        .expect("job_cancel");
    assert_eq!((cancelled.state, cancelled.fence), (JobState::Cancelled, 1));
    let history: Vec<_> = attempts(db, row.id)
        .await
        .iter()
        .map(|a| (a.fence, a.outcome))
        .collect();
    assert_eq!(history, vec![(1, AttemptOutcome::Cancelled)]);
    let lease = claimed[0].lease_token();
    assert_lease_lost(complete(db, lease, at(2_000)).await, lease);
}
