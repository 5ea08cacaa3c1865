//! Small builders and shorthands the cases share: a fixed injected clock, new jobs with
//! plain defaults, and the store calls the cases make most often.
//!
//! Time is always injected: [`t0`] is a fixed instant with whole milliseconds (every store
//! keeps milliseconds at least), and [`at`] is an offset from it, so every expected
//! timestamp is exact. Helpers panic with the operation's error: a case states rules, not
//! error plumbing.

use chrono::TimeZone;
use idem_store::{
    AttemptRow, JobCancel, JobClaim, JobComplete, JobFail, JobHeartbeat, JobInsert, JobList,
    JobRow, JobState, LeaseRenewal, LeaseToken, NewJob, StoreResult, Timestamp,
};

use crate::TestDb;

/// The queue [`job`] puts jobs in.
pub const QUEUE: &str = "default";
/// The lease [`claim`] takes, in milliseconds.
pub const LEASE_MS: i64 = 30_000;
/// The worker name [`claim`] records as `lease_owner`.
pub const WORKER: &str = "worker-1";
/// The `max_attempts` of [`job`].
pub const MAX_ATTEMPTS: i32 = 3;

/// The fixed instant every case measures from: 2030-06-01T12:00:00Z.
pub fn t0() -> Timestamp {
    chrono::Utc
        .with_ymd_and_hms(2030, 6, 1, 12, 0, 0)
        .single()
        .expect("a valid fixed instant")
}

/// `ms` milliseconds after [`t0`] (before it when negative).
pub fn at(ms: i64) -> Timestamp {
    t0() + chrono::Duration::milliseconds(ms)
}

/// A job of `kind` in [`QUEUE`]: args `{}`, priority 0, due now, [`MAX_ATTEMPTS`] attempts.
pub fn job(kind: &str) -> NewJob {
    NewJob {
        batch_id: None,
        follows_job: None,
        follows_batch: None,
        trace_parent: None,
        kind: kind.to_owned(),
        queue: QUEUE.to_owned(),
        args: serde_json::json!({}),
        priority: 0,
        run_at: None,
        max_attempts: MAX_ATTEMPTS,
        enqueue_key: None,
        claim: None,
        principal: None,
    }
}

/// [`job`] in `queue`.
pub fn job_in(queue: &str, kind: &str) -> NewJob {
    NewJob {
        queue: queue.to_owned(),
        ..job(kind)
    }
}

/// Inserts `jobs` at `now`.
pub async fn insert(db: &TestDb, jobs: Vec<NewJob>, now: Timestamp) -> Vec<JobRow> {
    let params = JobInsert {
        jobs,
        now: Some(now),
        ..JobInsert::default()
    };
    let inserted = db.store.job_insert(params).await.expect("job_insert");
    inserted.into_iter().map(|e| e.job).collect()
}

/// Inserts one job at `now`.
pub async fn insert_one(db: &TestDb, job: NewJob, now: Timestamp) -> JobRow {
    let mut rows = insert(db, vec![job], now).await;
    assert_eq!(rows.len(), 1, "job_insert of one job returned {rows:?}");
    rows.remove(0)
}

/// The params of a claim of `queue` by [`WORKER`] for [`LEASE_MS`] at `now`.
pub fn claim_params(queue: &str, limit: u32, now: Timestamp) -> JobClaim {
    JobClaim {
        queue: queue.to_owned(),
        limit,
        lease_ms: LEASE_MS,
        worker: WORKER.to_owned(),
        kinds: None,
        principal: None,
        now: Some(now),
    }
}

/// Claims up to `limit` jobs of `queue` at `now`, sorted by id.
pub async fn claim(db: &TestDb, queue: &str, limit: u32, now: Timestamp) -> Vec<JobRow> {
    let mut rows = db
        .store
        .job_claim(claim_params(queue, limit, now))
        .await
        .expect("job_claim");
    rows.sort_by_key(|j| j.id);
    rows
}

/// Inserts `job` at `now` and claims it at `now`; the job's queue must hold no other
/// claimable job. Returns the running row.
pub async fn running(db: &TestDb, job: NewJob, now: Timestamp) -> JobRow {
    let queue = job.queue.clone();
    let inserted = insert_one(db, job, now).await;
    let claimed = claim(db, &queue, 1, now).await;
    assert_eq!(
        claimed.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![inserted.id],
        "claiming the only job of queue {queue:?}"
    );
    claimed.into_iter().next().expect("one claimed job")
}

/// The job, which must exist.
pub async fn get(db: &TestDb, id: i64) -> JobRow {
    db.store
        .job_get(id)
        .await
        .expect("job_get")
        .unwrap_or_else(|| panic!("job {id} does not exist"))
}

/// The finished attempts of a job.
pub async fn attempts(db: &TestDb, id: i64) -> Vec<AttemptRow> {
    db.store.job_attempts(id).await.expect("job_attempts")
}

/// How each finished attempt of a job ended, oldest first.
pub async fn outcomes(db: &TestDb, id: i64) -> Vec<idem_store::AttemptOutcome> {
    attempts(db, id).await.iter().map(|a| a.outcome).collect()
}

/// Completes a claim at `now`.
pub async fn complete(db: &TestDb, lease: LeaseToken, now: Timestamp) -> StoreResult<JobRow> {
    let params = JobComplete {
        result: None,
        lease,
        now: Some(now),
    };
    db.store.job_complete(params).await
}

/// Fails a claim at `now` with `error`, retrying after `retry_in_ms` (`None`: dead).
pub async fn fail(
    db: &TestDb,
    lease: LeaseToken,
    retry_in_ms: Option<i64>,
    now: Timestamp,
) -> StoreResult<JobRow> {
    let params = JobFail {
        lease,
        error: "boom".to_owned(),
        retry_in_ms,
        snooze: false,
        now: Some(now),
    };
    db.store.job_fail(params).await
}

/// Extends `leases` by `lease_ms` at `now`; the renewals sorted by job id.
pub async fn heartbeat(
    db: &TestDb,
    leases: Vec<LeaseToken>,
    lease_ms: i64,
    now: Timestamp,
) -> Vec<LeaseRenewal> {
    let params = JobHeartbeat {
        leases,
        lease_ms,
        now: Some(now),
    };
    let mut renewals = db.store.job_heartbeat(params).await.expect("job_heartbeat");
    renewals.sort_by_key(|r| r.job_id);
    renewals
}

/// Cancels a job at `now`.
pub async fn cancel(db: &TestDb, job_id: i64, now: Timestamp) -> StoreResult<JobRow> {
    let params = JobCancel {
        job_id,
        now: Some(now),
    };
    db.store.job_cancel(params).await
}

/// A running job whose current fence is 2: claimed at `now`, failed with no delay and
/// claimed again at `now`. Its first claim's token is the job's fence minus one.
pub async fn reclaimed(db: &TestDb, job: NewJob, now: Timestamp) -> JobRow {
    let queue = job.queue.clone();
    let first = running(db, job, now).await;
    fail(db, first.lease_token(), Some(0), now)
        .await
        .expect("job_fail of the first claim");
    let again = claim(db, &queue, 1, now).await;
    assert_eq!(again.len(), 1, "reclaiming job {}", first.id);
    assert_eq!(again[0].fence, 2, "the second claim's fence");
    again.into_iter().next().expect("one reclaimed job")
}

/// All jobs (newest first), up to 10 000.
pub async fn all_jobs(db: &TestDb) -> Vec<JobRow> {
    list(db, JobList::default()).await
}

/// Jobs matching `params`; a zero limit means 10 000.
pub async fn list(db: &TestDb, mut params: JobList) -> Vec<JobRow> {
    if params.limit == 0 {
        params.limit = 10_000;
    }
    db.store.job_list(params).await.expect("job_list")
}

/// The ids of `jobs`, in their order.
pub fn ids(jobs: &[JobRow]) -> Vec<i64> {
    jobs.iter().map(|j| j.id).collect()
}

/// Jobs of `db` in `state`, oldest id first.
pub async fn ids_in_state(db: &TestDb, state: JobState) -> Vec<i64> {
    let mut out = ids(&list(
        db,
        JobList {
            state: Some(state),
            ..JobList::default()
        },
    )
    .await);
    out.sort_unstable();
    out
}

/// Asserts that `result` is [`idem_store::StoreError::LeaseLost`] for `lease`.
#[track_caller]
pub fn assert_lease_lost<T: std::fmt::Debug>(result: StoreResult<T>, lease: LeaseToken) {
    match result {
        Err(idem_store::StoreError::LeaseLost { job_id, fence }) => {
            assert_eq!(
                (job_id, fence),
                (lease.job_id, lease.fence),
                "LeaseLost names the claim"
            );
        }
        other => panic!("expected LeaseLost for {lease:?}, got {other:?}"),
    }
}

/// Spawns `fut` and returns once it has started running (a signal from inside the task).
pub async fn spawn_started<T, F>(fut: F) -> tokio::task::JoinHandle<T>
where
    T: Send + 'static,
    F: std::future::Future<Output = T> + Send + 'static,
{
    let (started, has_started) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let _ = started.send(());
        fut.await
    });
    has_started.await.expect("spawned task started");
    task
}

/// Asserts that `racer` waits for the open transaction `tx` to end. PostgreSQL: returns
/// once the racer is blocked on a lock `tx` holds (so the race certainly happens).
/// SQLite: every write transaction queues for the single writer, so the racer, a write,
/// cannot have finished while `tx` is open.
pub async fn assert_waits_for<T>(
    db: &TestDb,
    tx: &mut Box<dyn idem_store::StoreTx>,
    racer: &tokio::task::JoinHandle<T>,
) {
    match db.backend {
        crate::Backend::Postgres => {
            let blocked = pg_wait_until_blocked_by(db, tx);
            crate::harness::within(30, "waiting for the racer to block", blocked).await;
        }
        crate::Backend::Sqlite => {}
    }
    assert!(
        !racer.is_finished(),
        "the racer finished while the transaction was open"
    );
}

/// PostgreSQL only: returns once another connection is waiting for a lock that `tx`
/// holds — the signal that a concurrent operation has reached the row and is blocked.
/// Polls the server's lock graph (`pg_blocking_pids`), not a clock; wrap it in
/// [`crate::harness::within`] so a missing waiter fails instead of hanging.
pub async fn pg_wait_until_blocked_by(db: &TestDb, tx: &mut Box<dyn idem_store::StoreTx>) {
    pg_wait_until_n_blocked_by(db, tx, 1).await
}

/// PostgreSQL only: [`pg_wait_until_blocked_by`] until `n` other connections wait for
/// locks that `tx` holds.
pub async fn pg_wait_until_n_blocked_by(
    db: &TestDb,
    tx: &mut Box<dyn idem_store::StoreTx>,
    n: i64,
) {
    let pid = tx
        .query("SELECT pg_backend_pid()", &[])
        .await
        .expect("pg_backend_pid")
        .remove(0)
        .remove(0);
    pg_poll_n(db, "$1::int = ANY(pg_blocking_pids(pid))", pid, n).await
}

/// PostgreSQL only: returns once the server backend `pid` waits for a lock (whoever
/// holds it). Polls the lock graph like [`pg_wait_until_blocked_by`].
pub async fn pg_wait_until_waiting(db: &TestDb, pid: i64) {
    pg_poll(
        db,
        "pid = $1::int AND cardinality(pg_blocking_pids(pid)) > 0",
        pid.into(),
    )
    .await
}

/// Polls until some backend of `pg_stat_activity` matches `condition` (with `$1` bound).
async fn pg_poll(db: &TestDb, condition: &str, arg: idem_store::SqlValue) {
    pg_poll_n(db, condition, arg, 1).await
}

/// Polls until at least `n` backends of `pg_stat_activity` match `condition`.
async fn pg_poll_n(db: &TestDb, condition: &str, arg: idem_store::SqlValue, n: i64) {
    assert_eq!(
        db.backend,
        crate::Backend::Postgres,
        "a PostgreSQL-only signal"
    );
    let sql = format!("SELECT count(*) FROM pg_stat_activity WHERE {condition}");
    loop {
        let rows = db
            .store
            .query(&sql, std::slice::from_ref(&arg))
            .await
            .expect("pg_stat_activity");
        if rows[0][0].as_i64().is_some_and(|count| count >= n) {
            return;
        }
        tokio::task::yield_now().await;
    }
}

/// PostgreSQL only: a gate that pauses every later `INSERT` statement on `table`, in
/// this schema, at the end of the statement (after its `ON CONFLICT` was decided), until
/// the returned transaction ends. It replays a race between a statement and the next
/// one of the same transaction deterministically: the inserter blocks on an advisory
/// lock the gate holds (one per schema, so parallel tests never share it), which
/// [`assert_waits_for`] sees.
pub async fn pg_gate_after_insert(db: &TestDb, table: &str) -> Box<dyn idem_store::StoreTx> {
    pg_gate_after(db, table, "INSERT").await
}

/// PostgreSQL only: [`pg_gate_after_insert`] for `UPDATE` statements on `table`: every
/// later update pauses at the end of its statement (its rows written and locked) until
/// the returned transaction ends.
pub async fn pg_gate_after_update(db: &TestDb, table: &str) -> Box<dyn idem_store::StoreTx> {
    pg_gate_after(db, table, "UPDATE").await
}

/// The gate of [`pg_gate_after_insert`] after `event` (`INSERT` or `UPDATE`) statements.
async fn pg_gate_after(db: &TestDb, table: &str, event: &str) -> Box<dyn idem_store::StoreTx> {
    assert_eq!(
        db.backend,
        crate::Backend::Postgres,
        "a PostgreSQL-only gate"
    );
    let name = format!("test_gate_{}_{table}", event.to_lowercase());
    let function = format!(
        "CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN PERFORM pg_advisory_xact_lock_shared(hashtext(current_schema())); RETURN NULL; END $$"
    );
    let trigger = format!(
        "CREATE TRIGGER {name} AFTER {event} ON {table} \
         FOR EACH STATEMENT EXECUTE FUNCTION {name}()"
    );
    let mut setup = db.store.begin().await.expect("begin");
    setup.execute(&function, &[]).await.expect("gate function");
    setup.execute(&trigger, &[]).await.expect("gate trigger");
    setup.commit().await.expect("commit the gate");
    let mut gate = db.store.begin().await.expect("begin");
    let lock = "SELECT pg_advisory_xact_lock(hashtext(current_schema()))";
    gate.query(lock, &[]).await.expect("close the gate");
    gate
}
