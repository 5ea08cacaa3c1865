//! Leases after the claim: `job_heartbeat` extends only current claims, in one call, and
//! `job_lock` is the fence check that opens an effect transaction: it returns the job for
//! a current claim, refuses a stale one with `LeaseLost`, and holds the job still until
//! its transaction ends.
//!
//! The racing cases are deterministic without sleeps. On PostgreSQL a rescue must *skip*
//! a locked row, so the case awaits the rescue while the lock is held; a cancel or a fence
//! check must *wait* for the row, and the case waits until the server shows it blocked
//! (`pg_blocking_pids`) before ending the transaction it waits for. On SQLite every write
//! transaction queues for the single writer, so the racer cannot finish before the
//! commit, and the case awaits it after. Either way the outcome is fixed: the holder of
//! the lock completes normally and the racer sees only what was committed.

use std::sync::Arc;

use idem_store::{
    AttemptOutcome, Backend, JobCancel, JobComplete, JobCompleteMany, JobHeartbeat, JobLock,
    JobRescue, JobState, LeaseRenewal, LeaseToken, Store, StoreError,
};

use crate::fixture::{
    LEASE_MS, QUEUE, assert_lease_lost, assert_waits_for, at, claim, complete, fail, get,
    heartbeat, ids, insert, job, job_in, outcomes, pg_wait_until_waiting, reclaimed, running,
    spawn_started, t0,
};
use crate::harness::within;
use crate::{TestDb, open_store};

/// One heartbeat extends every current lease it names to `now + lease_ms` and omits the
/// rest: a stale fence, a job failed, a job completed, a job that does not exist. A
/// lease named twice is renewed once.
pub async fn heartbeat_extends_only_current_leases(db: &TestDb) {
    let rows = insert(db, (0..4).map(|i| job(&format!("j{i}"))).collect(), t0()).await;
    let claimed = claim(db, QUEUE, 4, t0()).await;
    let [a, b, c, e] = [0, 1, 2, 3].map(|i| claimed[i].clone());
    fail(db, c.lease_token(), Some(3_600_000), at(1))
        .await
        .expect("fail c");
    complete(db, e.lease_token(), at(1))
        .await
        .expect("complete e");
    let d = reclaimed(db, job_in("other", "d"), t0()).await;
    let stale_d = LeaseToken {
        fence: d.fence - 1,
        ..d.lease_token()
    };
    let missing = LeaseToken {
        job_id: rows.iter().map(|r| r.id).max().unwrap_or(0) + 1_000,
        fence: 1,
    };
    let tokens = vec![
        a.lease_token(),
        a.lease_token(),
        stale_d,
        b.lease_token(),
        c.lease_token(),
        e.lease_token(),
        missing,
    ];
    let renewed = heartbeat(db, tokens, 45_000, at(10_000)).await;
    let expected: Vec<LeaseRenewal> = [&a, &b]
        .iter()
        .map(|j| LeaseRenewal {
            job_id: j.id,
            fence: 1,
            lease_expires_at: at(55_000),
        })
        .collect();
    assert_eq!(renewed, expected);
    for j in [&a, &b] {
        let row = get(db, j.id).await;
        assert_eq!(
            row.lease_expires_at,
            Some(at(55_000)),
            "job {} extended",
            j.id
        );
        assert_eq!(
            (row.state, row.attempt, row.fence),
            (JobState::Running, 1, 1)
        );
    }
    assert_eq!(
        get(db, d.id).await,
        d,
        "the stale token left the current claim alone"
    );
    assert_eq!(get(db, c.id).await.state, JobState::Retryable);
    assert_eq!(get(db, e.id).await.state, JobState::Completed);
}

/// A heartbeat naming no lease changes nothing and returns nothing.
pub async fn heartbeat_of_no_leases_is_a_no_op(db: &TestDb) {
    let row = running(db, job("idle"), t0()).await;
    assert!(heartbeat(db, vec![], LEASE_MS, at(1_000)).await.is_empty());
    assert_eq!(get(db, row.id).await, row);
}

/// A heartbeat keeps the rescuer away until the extended lease has expired.
pub async fn heartbeat_keeps_the_rescuer_away(db: &TestDb) {
    let row = running(db, job("long"), t0()).await;
    let renewed = heartbeat(db, vec![row.lease_token()], 30_000, at(20_000)).await;
    assert_eq!(renewed.len(), 1);
    assert!(
        rescue(db, at(40_000)).await.is_empty(),
        "rescued within the extended lease"
    );
    assert_eq!(ids(&rescue(db, at(50_001)).await), vec![row.id]);
}

/// `job_lock` on a current claim returns the job as stored and changes nothing.
pub async fn lock_returns_the_current_claim(db: &TestDb) {
    let row = running(db, job("effect"), t0()).await;
    let mut tx = db.store.begin().await.expect("begin");
    let locked = tx
        .job_lock(JobLock::of(row.lease_token()))
        .await
        .expect("job_lock");
    assert_eq!(locked, row);
    tx.commit().await.expect("commit");
    assert_eq!(get(db, row.id).await, row, "a lock changes nothing");
}

/// `job_lock` refuses with `LeaseLost` a stale fence, a finished job, a job never
/// claimed and a missing job; the current claim still locks.
pub async fn lock_refuses_a_claim_not_current(db: &TestDb) {
    let current = reclaimed(db, job_in("q1", "retried"), t0()).await;
    let done = running(db, job_in("q2", "done"), t0()).await;
    complete(db, done.lease_token(), at(1))
        .await
        .expect("complete");
    let waiting = insert(db, vec![job_in("q3", "waiting")], t0())
        .await
        .remove(0);
    let refused = [
        LeaseToken {
            fence: 1,
            ..current.lease_token()
        },
        done.lease_token(),
        waiting.lease_token(),
        LeaseToken {
            job_id: waiting.id + 1_000,
            fence: 1,
        },
    ];
    for lease in refused {
        let mut tx = db.store.begin().await.expect("begin");
        assert_lease_lost(tx.job_lock(JobLock::of(lease)).await, lease);
        tx.rollback().await.expect("rollback");
    }
    let mut tx = db.store.begin().await.expect("begin");
    tx.job_lock(JobLock::of(current.lease_token()))
        .await
        .expect("current claim locks");
    tx.commit().await.expect("commit");
}

/// A rescue racing an effect transaction that holds the job's lock does not touch the
/// job, even though its lease has expired by the rescue's clock: the transaction then
/// completes the job under its fence.
pub async fn lock_holds_off_a_concurrent_rescue(db: &TestDb) {
    rescue_beside_a_lock(db, db.store.clone()).await;
}

/// The same, with the rescue in another store on the same database, as in another
/// process (SQLite: it queues on the file's write lock).
pub async fn lock_holds_off_a_rescue_from_another_store(db: &TestDb) {
    let other = open_store(&db.url)
        .await
        .expect("a second store on the url");
    rescue_beside_a_lock(db, other.clone()).await;
    other.close().await;
}

async fn rescue_beside_a_lock(db: &TestDb, store: Arc<dyn Store>) {
    let row = running(db, job("effect"), t0()).await;
    let mut tx = db.store.begin().await.expect("begin");
    tx.job_lock(JobLock::of(row.lease_token()))
        .await
        .expect("job_lock");
    let params = JobRescue {
        limit: 10,
        retry_in_ms: 0,
        max_attempts: None,
        now: Some(at(10 * LEASE_MS)),
    };
    let mut rescue = spawn_started(async move { store.job_rescue(params).await }).await;
    let early = match db.backend {
        // PostgreSQL: the rescue skips the locked row and finishes while the lock is held.
        Backend::Postgres => Some(within(30, "rescue beside a lock", &mut rescue).await),
        // SQLite: the rescue waits for the single writer.
        Backend::Sqlite => None,
    };
    if early.is_none() {
        assert_waits_for(db, &mut tx, &rescue).await;
    }
    let done = tx
        .job_complete(JobComplete {
            result: None,
            lease: row.lease_token(),
            now: Some(at(1_000)),
        })
        .await
        .expect("complete under the lock");
    tx.commit().await.expect("commit");
    let rescued = match early {
        Some(rescued) => rescued,
        None => within(30, "rescue after the lock", rescue).await,
    }
    .expect("rescue task")
    .expect("job_rescue");
    assert!(
        rescued.iter().all(|j| j.id != row.id),
        "rescued the locked job: {rescued:?}"
    );
    assert_eq!(get(db, row.id).await, done);
    let outcomes = outcomes(db, row.id).await;
    assert_eq!(outcomes, vec![AttemptOutcome::Completed]);
}

/// A cancel racing an effect transaction that holds the job's lock waits for it, and
/// then finds the job completed: `Conflict`, and the completion stands.
pub async fn lock_holds_off_a_concurrent_cancel(db: &TestDb) {
    let row = running(db, job("effect"), t0()).await;
    let mut tx = db.store.begin().await.expect("begin");
    tx.job_lock(JobLock::of(row.lease_token()))
        .await
        .expect("job_lock");
    let store = db.store.clone();
    let params = JobCancel {
        job_id: row.id,
        now: Some(at(2_000)),
    };
    let cancel = spawn_started(async move { store.job_cancel(params).await }).await;
    assert_waits_for(db, &mut tx, &cancel).await;
    let done = tx
        .job_complete(JobComplete {
            result: None,
            lease: row.lease_token(),
            now: Some(at(1_000)),
        })
        .await
        .expect("complete under the lock");
    tx.commit().await.expect("commit");
    let result = within(30, "cancel after the lock", cancel)
        .await
        .expect("cancel task");
    assert!(
        matches!(result, Err(StoreError::Conflict(_))),
        "cancel got {result:?}"
    );
    assert_eq!(get(db, row.id).await, done);
    let outcomes = outcomes(db, row.id).await;
    assert_eq!(outcomes, vec![AttemptOutcome::Completed]);
}

/// A fence check racing a rescue's open transaction waits for it and then sees the
/// rescue: `LeaseLost`, never the job as it was before the rescue.
pub async fn lock_sees_a_concurrent_rescue(db: &TestDb) {
    let row = running(db, job("paused"), t0()).await;
    let mut rescue = db.store.begin().await.expect("begin");
    let params = JobRescue {
        limit: 10,
        retry_in_ms: 0,
        max_attempts: None,
        now: Some(at(10 * LEASE_MS)),
    };
    let rescued = rescue.job_rescue(params).await.expect("job_rescue");
    assert_eq!(
        rescued.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![row.id]
    );
    let store = db.store.clone();
    let lease = row.lease_token();
    let lock = spawn_started(async move {
        let mut tx = store.begin().await?;
        let locked = tx.job_lock(JobLock::of(lease)).await;
        tx.rollback().await?;
        locked
    })
    .await;
    assert_waits_for(db, &mut rescue, &lock).await;
    rescue.commit().await.expect("commit the rescue");
    let result = within(30, "lock after the rescue", lock)
        .await
        .expect("lock task");
    assert_lease_lost(result, lease);
    assert_eq!(get(db, row.id).await.state, JobState::Retryable);
}

async fn rescue(db: &TestDb, now: idem_store::Timestamp) -> Vec<idem_store::JobRow> {
    let params = JobRescue {
        limit: 100,
        retry_in_ms: 0,
        max_attempts: None,
        now: Some(now),
    };
    db.store.job_rescue(params).await.expect("job_rescue")
}

/// PostgreSQL: a worker's heartbeat and its batched completion lock the rows they share
/// in one order (by id), whatever order their leases come in, so they cannot deadlock.
/// Two transactions hold the two rows; the heartbeat (leases a, b) waits, then the
/// completion (leases b, a) waits; the holder of b commits, then the holder of a. Locked
/// in the order given, the heartbeat would hold a and wait for b while the completion
/// held b and waited for a: a deadlock, one of them aborted.
pub async fn heartbeat_and_complete_many_lock_in_one_order(db: &TestDb) {
    insert(db, vec![job("a"), job("b")], t0()).await;
    // Enough other running jobs, with statistics, that the planner reaches each row by
    // its key in the order the leases come (as on a busy table), not by a scan of the
    // few running rows in their physical order.
    let others = (0..5_000).map(|_| job_in("others", "filler")).collect();
    insert(db, others, t0()).await;
    claim(db, "others", 5_000, t0()).await;
    let mut tx = db.store.begin().await.expect("begin");
    tx.execute("ANALYZE idem_job", &[]).await.expect("analyze");
    tx.commit().await.expect("commit");
    let claimed = claim(db, QUEUE, 2, t0()).await;
    let [a, b] = [claimed[0].lease_token(), claimed[1].lease_token()];
    let lock = "SELECT id FROM idem_job WHERE id = $1 FOR NO KEY UPDATE";
    let mut hold_a = db.store.begin().await.expect("begin");
    hold_a
        .query(lock, &[a.job_id.into()])
        .await
        .expect("lock a");
    let mut hold_b = db.store.begin().await.expect("begin");
    hold_b
        .query(lock, &[b.job_id.into()])
        .await
        .expect("lock b");
    let (beat_pid, beat) = in_own_tx(db, move |mut tx| async move {
        let params = JobHeartbeat {
            leases: vec![a, b],
            lease_ms: LEASE_MS,
            now: Some(at(1_000)),
        };
        let renewed = tx.job_heartbeat(params).await?;
        tx.commit().await.map(|()| renewed.len())
    })
    .await;
    within(
        30,
        "the heartbeat waits",
        pg_wait_until_waiting(db, beat_pid),
    )
    .await;
    let (done_pid, done) = in_own_tx(db, move |mut tx| async move {
        let params = JobCompleteMany {
            results: Vec::new(),
            leases: vec![b, a],
            now: Some(at(2_000)),
        };
        let completed = tx.job_complete_many(params).await?;
        tx.commit().await.map(|()| completed.len())
    })
    .await;
    within(
        30,
        "the completion waits",
        pg_wait_until_waiting(db, done_pid),
    )
    .await;
    hold_b.commit().await.expect("release b");
    within(
        30,
        "the completion waits for a",
        pg_wait_until_waiting(db, done_pid),
    )
    .await;
    hold_a.commit().await.expect("release a");
    let beat = within(30, "the heartbeat", beat)
        .await
        .expect("heartbeat task");
    let done = within(30, "the completion", done)
        .await
        .expect("completion task");
    assert!(
        beat.is_ok(),
        "the heartbeat was a deadlock victim: {beat:?}"
    );
    assert_eq!(done.expect("the completion was a deadlock victim"), 2);
}

/// Runs `op` on a transaction of its own in a task; returns its server pid once the
/// task has it, and the task.
async fn in_own_tx<F, Fut>(
    db: &TestDb,
    op: F,
) -> (i64, tokio::task::JoinHandle<idem_store::StoreResult<usize>>)
where
    F: FnOnce(Box<dyn idem_store::StoreTx>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = idem_store::StoreResult<usize>> + Send,
{
    let store = db.store.clone();
    let (pid_tx, pid_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut tx = store.begin().await?;
        let pid = tx.query("SELECT pg_backend_pid()", &[]).await?;
        let _ = pid_tx.send(pid[0][0].as_i64().unwrap_or_default());
        op(tx).await
    });
    (pid_rx.await.expect("the task reports its pid"), task)
}

/// PostgreSQL: while an effect transaction holds its job (`FOR KEY SHARE`) and a cancel
/// waits for it (`FOR UPDATE`), the worker's heartbeat does not queue behind the waiting
/// cancel (its `FOR NO KEY UPDATE` does not conflict with the held lock), and the row
/// version the heartbeat writes still carries the effect transaction's lock: a rescue
/// past the renewed lease skips the job. The effect transaction then completes the job
/// and the cancel finds it completed.
pub async fn lock_outlasts_a_heartbeat_beside_a_waiting_cancel(db: &TestDb) {
    let row = running(db, job("effect"), t0()).await;
    let lease = row.lease_token();
    let mut tx = db.store.begin().await.expect("begin");
    tx.job_lock(JobLock::of(lease)).await.expect("job_lock");
    let store = db.store.clone();
    let params = JobCancel {
        job_id: row.id,
        now: Some(at(2_000)),
    };
    let cancel = spawn_started(async move { store.job_cancel(params).await }).await;
    assert_waits_for(db, &mut tx, &cancel).await;
    let renewed = within(
        30,
        "a heartbeat beside a waiting cancel",
        heartbeat(db, vec![lease], LEASE_MS, at(5_000)),
    )
    .await;
    assert_eq!(
        renewed,
        vec![LeaseRenewal {
            job_id: row.id,
            fence: row.fence,
            lease_expires_at: at(5_000 + LEASE_MS),
        }]
    );
    let rescued = rescue(db, at(5_000 + 10 * LEASE_MS)).await;
    assert!(
        rescued.is_empty(),
        "rescued a job whose effect transaction is open: {rescued:?}"
    );
    assert!(!cancel.is_finished(), "the cancel waits for the lock");
    let done = tx
        .job_complete(JobComplete {
            result: None,
            lease,
            now: Some(at(6_000)),
        })
        .await
        .expect("complete under the lock");
    tx.commit().await.expect("commit");
    let result = within(30, "cancel after the lock", cancel)
        .await
        .expect("cancel task");
    assert!(
        matches!(result, Err(StoreError::Conflict(_))),
        "cancel got {result:?}"
    );
    assert_eq!(get(db, row.id).await, done);
    assert_eq!(outcomes(db, row.id).await, vec![AttemptOutcome::Completed]);
}
