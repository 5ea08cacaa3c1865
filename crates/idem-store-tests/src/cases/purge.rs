//! `purge` and `purge_count`: each target's records older than the cutoff (strictly) are
//! deleted oldest first, at most `limit` per call, and newer ones are kept; finished-job
//! purges take completed and cancelled jobs with their attempts, dead-job purges dead
//! ones, and neither ever touches a job still waiting or running; effect keys of a job
//! that may still run again (any state but completed) are kept. A large backlog goes in
//! bounded batches.

use idem_store::{
    EffectClaim, EffectClaimed, JobComplete, JobCompleteMany, JobDiscard, JobFail, JobLock,
    JobRetry, JobRow, JobState, LeaseToken, NewJob, Purge, PurgeTarget, Timestamp,
};

use super::enqueue_key::{WINDOW_MS, enqueue_one, enqueue_params, finish, keyed};
use crate::TestDb;
use crate::fixture::{
    assert_waits_for, at, attempts, cancel, claim, complete, fail, get, ids, insert, insert_one,
    job_in, running, spawn_started, t0,
};
use crate::harness::within;

/// Purges up to `limit` records of `target` older than `before`; how many went.
async fn purge(db: &TestDb, target: PurgeTarget, before: Timestamp, limit: u32) -> u64 {
    let params = Purge {
        target,
        before,
        limit,
    };
    db.store.purge(params).await.expect("purge")
}

/// How many records of `target` a purge with cutoff `before` would delete.
async fn count(db: &TestDb, target: PurgeTarget, before: Timestamp) -> u64 {
    db.store
        .purge_count(target, before)
        .await
        .expect("purge_count")
}

/// A job of its own `queue`, claimed at [`t0`] and completed at `when`.
async fn completed_at(db: &TestDb, queue: &str, when: Timestamp) -> JobRow {
    let row = running(db, job_in(queue, "completed"), t0()).await;
    complete(db, row.lease_token(), when)
        .await
        .expect("complete")
}

/// A job of its own `queue`, claimed at [`t0`] and cancelled while running at `when`.
async fn cancelled_at(db: &TestDb, queue: &str, when: Timestamp) -> JobRow {
    let row = running(db, job_in(queue, "cancelled"), t0()).await;
    cancel(db, row.id, when).await.expect("cancel")
}

/// A job of its own `queue`, claimed at [`t0`] and failed to dead at `when`.
async fn dead_at(db: &TestDb, queue: &str, when: Timestamp) -> JobRow {
    let row = running(db, job_in(queue, "dead"), t0()).await;
    fail(db, row.lease_token(), None, when)
        .await
        .expect("fail to dead")
}

/// Waiting and running jobs of their own queues: available, scheduled, retryable,
/// running.
async fn live_jobs(db: &TestDb) -> Vec<JobRow> {
    let available = insert_one(db, job_in("live-a", "available"), t0()).await;
    let later = NewJob {
        run_at: Some(at(3_600_000)),
        ..job_in("live-s", "scheduled")
    };
    let scheduled = insert_one(db, later, t0()).await;
    let flaky = running(db, job_in("live-f", "retryable"), t0()).await;
    fail(db, flaky.lease_token(), Some(3_600_000), at(1))
        .await
        .expect("fail to retryable");
    let run = running(db, job_in("live-r", "running"), t0()).await;
    vec![available, scheduled, flaky, run]
}

/// Each job of `jobs` and its attempts, as stored now.
async fn snapshot(db: &TestDb, jobs: &[JobRow]) -> Vec<(JobRow, Vec<idem_store::AttemptRow>)> {
    let mut out = Vec::with_capacity(jobs.len());
    for j in jobs {
        out.push((get(db, j.id).await, attempts(db, j.id).await));
    }
    out
}

/// Asserts that the jobs are gone with their attempts.
async fn assert_gone(db: &TestDb, jobs: &[&JobRow]) {
    for j in jobs {
        let row = db.store.job_get(j.id).await.expect("job_get");
        assert_eq!(row, None, "job {} ({}) was purged", j.id, j.queue);
        assert!(
            attempts(db, j.id).await.is_empty(),
            "attempts of job {}",
            j.id
        );
    }
}

/// The first column of each row of `sql`, as text.
async fn texts(db: &TestDb, sql: &str) -> Vec<String> {
    let rows = db.store.query(sql, &[]).await.expect("query");
    rows.into_iter()
        .map(|r| r[0].as_str().expect("a text column").to_owned())
        .collect()
}

/// `SELECT count(*)` of `table`.
async fn rows_in(db: &TestDb, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {table}");
    let rows = db.store.query(&sql, &[]).await.expect("count");
    match rows.as_slice() {
        [row] => row[0].as_i64().expect("an integer count"),
        other => panic!("unexpected count rows {other:?}"),
    }
}

/// Finished jobs (completed and cancelled) finalized before the cutoff go oldest first,
/// at most `limit` per call, with their attempts; one finalized at the cutoff or later,
/// dead jobs and waiting or running jobs stay. `purge_count` agrees throughout.
pub async fn purge_finished_jobs_oldest_first(db: &TestDb) {
    let c1 = completed_at(db, "c1", at(1_000)).await;
    let x1 = cancelled_at(db, "x1", at(1_500)).await;
    let c2 = completed_at(db, "c2", at(2_000)).await;
    let x2 = cancelled_at(db, "x2", at(3_000)).await;
    let mut kept = vec![
        completed_at(db, "at-cutoff", at(5_000)).await,
        cancelled_at(db, "newer", at(6_000)).await,
        dead_at(db, "dead", at(1_000)).await,
    ];
    kept.extend(live_jobs(db).await);
    let before = snapshot(db, &kept).await;
    let cutoff = at(5_000);
    let target = PurgeTarget::FinishedJobs;
    assert_eq!(count(db, target, cutoff).await, 4);
    assert_eq!(purge(db, target, cutoff, 2).await, 2);
    assert_gone(db, &[&c1, &x1]).await;
    assert_eq!(get(db, c2.id).await, c2, "the newer of the old ones waits");
    assert_eq!(count(db, target, cutoff).await, 2);
    assert_eq!(purge(db, target, cutoff, 10).await, 2);
    assert_gone(db, &[&c2, &x2]).await;
    assert_eq!(count(db, target, cutoff).await, 0);
    assert_eq!(purge(db, target, cutoff, 10).await, 0);
    assert_eq!(snapshot(db, &kept).await, before, "the rest untouched");
}

/// Dead jobs finalized before the cutoff go oldest first with their attempts; newer dead
/// jobs, completed, cancelled and running jobs stay.
pub async fn purge_dead_jobs_only(db: &TestDb) {
    let d1 = dead_at(db, "d1", at(1_000)).await;
    let d2 = dead_at(db, "d2", at(2_000)).await;
    let mut kept = vec![
        dead_at(db, "d3", at(9_000)).await,
        completed_at(db, "c", at(1_000)).await,
        cancelled_at(db, "x", at(1_000)).await,
    ];
    kept.extend(live_jobs(db).await);
    let before = snapshot(db, &kept).await;
    let cutoff = at(5_000);
    let target = PurgeTarget::DeadJobs;
    assert_eq!(count(db, target, cutoff).await, 2);
    assert_eq!(purge(db, target, cutoff, 1).await, 1);
    assert_gone(db, &[&d1]).await;
    assert_eq!(get(db, d2.id).await, d2, "the newer dead job waits");
    assert_eq!(count(db, target, cutoff).await, 1);
    assert_eq!(purge(db, target, cutoff, 10).await, 1);
    assert_gone(db, &[&d2]).await;
    assert_eq!(count(db, target, cutoff).await, 0);
    assert_eq!(purge(db, target, cutoff, 10).await, 0);
    assert_eq!(snapshot(db, &kept).await, before, "the rest untouched");
}

/// Effect keys created before the cutoff by a job that has completed go oldest first; a
/// purged key can be claimed anew, a kept one still answers with its record; the job is
/// untouched.
pub async fn purge_effect_keys_created_before_the_cutoff(db: &TestDb) {
    let row = running(db, job_in("e", "mail"), t0()).await;
    let claim_at = |lease: LeaseToken, key: &str, ms: i64| EffectClaim {
        key: key.into(),
        kind: "fx".into(),
        lease,
        now: Some(at(ms)),
    };
    let mut tx = db.store.begin().await.expect("begin");
    tx.job_lock(JobLock::of(row.lease_token()))
        .await
        .expect("lock");
    for (key, ms) in [
        ("fx:1", 1_000),
        ("fx:2", 2_000),
        ("fx:3", 3_000),
        ("fx:4", 8_000),
    ] {
        let claim = claim_at(row.lease_token(), key, ms);
        tx.effect_claim(claim).await.expect("claim");
    }
    let done = tx
        .job_complete(JobComplete {
            result: None,
            lease: row.lease_token(),
            now: Some(at(8_000)),
        })
        .await
        .expect("complete");
    tx.commit().await.expect("commit");
    let keys = "SELECT key FROM idem_effect ORDER BY key";
    let (target, cutoff) = (PurgeTarget::EffectKeys, at(3_000));
    assert_eq!(count(db, target, cutoff).await, 2);
    assert_eq!(purge(db, target, cutoff, 1).await, 1);
    assert_eq!(texts(db, keys).await, ["fx:2", "fx:3", "fx:4"]);
    assert_eq!(count(db, target, cutoff).await, 1);
    assert_eq!(purge(db, target, cutoff, 10).await, 1);
    assert_eq!(texts(db, keys).await, ["fx:3", "fx:4"]);
    assert_eq!(count(db, target, cutoff).await, 0);
    assert_eq!(purge(db, target, cutoff, 10).await, 0);
    let next = running(db, job_in("e2", "mail"), t0()).await;
    let mut tx = db.store.begin().await.expect("begin");
    tx.job_lock(JobLock::of(next.lease_token()))
        .await
        .expect("lock");
    let purged = tx
        .effect_claim(claim_at(next.lease_token(), "fx:1", 9_000))
        .await
        .expect("claim");
    assert_eq!(purged, EffectClaimed::New, "a purged key is free");
    match tx
        .effect_claim(claim_at(next.lease_token(), "fx:3", 9_000))
        .await
        .expect("claim")
    {
        EffectClaimed::Done(r) => assert_eq!((r.job_id, r.created_at), (row.id, at(3_000))),
        EffectClaimed::New => panic!("a key created at the cutoff must be kept"),
    }
    tx.rollback().await.expect("rollback");
    assert_eq!(get(db, row.id).await, done, "the job untouched");
}

/// Records effect key `key` for the running job `row` at `now`.
async fn record_key(db: &TestDb, row: &JobRow, key: &str, now: Timestamp) {
    let mut tx = db.store.begin().await.expect("begin");
    tx.job_lock(JobLock::of(row.lease_token()))
        .await
        .expect("lock");
    let claim = EffectClaim {
        key: key.into(),
        kind: "fx".into(),
        lease: row.lease_token(),
        now: Some(now),
    };
    assert_eq!(
        tx.effect_claim(claim).await.expect("claim"),
        EffectClaimed::New
    );
    tx.commit().await.expect("commit");
}

/// Effect keys past their window are kept while the job that recorded them may still
/// run again: it is running, waiting to retry, snoozed, dead or cancelled (an operator
/// may retry the last two), so its later attempt finds the key its earlier one
/// committed however long it waited. They go once their job has completed or is gone.
pub async fn purge_keeps_the_effect_keys_of_jobs_that_may_run_again(db: &TestDb) {
    let mut jobs = Vec::new();
    for name in [
        "running",
        "retryable",
        "snoozed",
        "dead",
        "cancelled",
        "completed",
        "gone",
    ] {
        let row = running(db, job_in(name, name), t0()).await;
        record_key(db, &row, name, at(1_000)).await;
        jobs.push(row);
    }
    let lease = |i: usize| jobs[i].lease_token();
    fail(db, lease(1), Some(60_000), at(2_000))
        .await
        .expect("fail to retryable");
    let snooze = JobFail {
        lease: lease(2),
        error: "later".into(),
        retry_in_ms: Some(60_000),
        snooze: true,
        now: Some(at(2_000)),
    };
    db.store.job_fail(snooze).await.expect("snooze");
    fail(db, lease(3), None, at(2_000))
        .await
        .expect("fail to dead");
    cancel(db, jobs[4].id, at(4_000)).await.expect("cancel");
    complete(db, lease(5), at(4_000)).await.expect("complete");
    complete(db, lease(6), at(2_000)).await.expect("complete");
    assert_eq!(purge(db, PurgeTarget::FinishedJobs, at(3_000), 10).await, 1);
    assert!(db.store.job_get(jobs[6].id).await.expect("get").is_none());
    let (target, cutoff) = (PurgeTarget::EffectKeys, at(5_000));
    assert_eq!(count(db, target, cutoff).await, 2);
    assert_eq!(purge(db, target, cutoff, 10).await, 2);
    assert_eq!(count(db, target, cutoff).await, 0);
    let keys = "SELECT key FROM idem_effect ORDER BY key";
    assert_eq!(
        texts(db, keys).await,
        ["cancelled", "dead", "retryable", "running", "snoozed"]
    );
}

/// Enqueue keys taken before the cutoff go oldest first, their jobs stay; a purged key
/// is free for a new job, a kept one still deduplicates.
pub async fn purge_enqueue_keys_created_before_the_cutoff(db: &TestDb) {
    let mut jobs = Vec::new();
    for (key, ms) in [("k1", 1_000), ("k2", 2_000), ("k3", 3_000), ("k4", 8_000)] {
        let held = enqueue_one(db, keyed("q", key, key), at(ms)).await;
        finish(db, &held).await;
        jobs.push(get(db, held.job.id).await);
    }
    let before = snapshot(db, &jobs).await;
    let keys = "SELECT key FROM idem_enqueue_key ORDER BY key";
    let (target, cutoff) = (PurgeTarget::EnqueueKeys, at(3_000));
    assert_eq!(count(db, target, cutoff).await, 2);
    assert_eq!(purge(db, target, cutoff, 1).await, 1);
    assert_eq!(texts(db, keys).await, ["k2", "k3", "k4"]);
    assert_eq!(count(db, target, cutoff).await, 1);
    assert_eq!(purge(db, target, cutoff, 10).await, 1);
    assert_eq!(texts(db, keys).await, ["k3", "k4"]);
    assert_eq!(count(db, target, cutoff).await, 0);
    assert_eq!(purge(db, target, cutoff, 10).await, 0);
    assert_eq!(snapshot(db, &jobs).await, before, "the jobs untouched");
    let free = enqueue_one(db, keyed("q", "k1-again", "k1"), at(9_000)).await;
    assert!(!free.deduplicated, "a purged key is free: {free:?}");
    let held = enqueue_one(db, keyed("q", "k3-again", "k3"), at(9_000)).await;
    assert!(held.deduplicated, "a kept key still holds: {held:?}");
    assert_eq!(held.job.id, jobs[2].id);
}

/// 100 000 finished jobs older than the cutoff go in batches of at most 10 000, oldest
/// first, with their attempts; the 50 finished after the cutoff and 50 live jobs
/// (available, running) are untouched.
pub async fn purge_of_a_large_table_runs_in_bounded_batches(db: &TestDb) {
    const OLD: usize = 100_000;
    const CHUNK: usize = 10_000;
    const BATCH: u32 = 10_000;
    fill_finished(db, "old", OLD, CHUNK, 1_000).await;
    let cutoff = at(100_000);
    let mut kept = fill_finished(db, "recent", 50, 50, 200_000).await;
    let available = (0..25).map(|_| job_in("live", "available")).collect();
    kept.extend(insert(db, available, t0()).await);
    let busy = (0..25).map(|_| job_in("busy", "running")).collect();
    insert(db, busy, t0()).await;
    kept.extend(claim(db, "busy", 25, t0()).await);
    let before = snapshot(db, &kept).await;
    let target = PurgeTarget::FinishedJobs;
    assert_eq!(count(db, target, cutoff).await, OLD as u64);
    let (mut batches, mut deleted) = (0, 0);
    loop {
        let n = purge(db, target, cutoff, BATCH).await;
        assert!(n <= u64::from(BATCH), "a batch of {n}");
        if n == 0 {
            break;
        }
        batches += 1;
        deleted += n;
        assert!(batches <= OLD / CHUNK * 2, "purge does not converge");
        assert_eq!(count(db, target, cutoff).await, OLD as u64 - deleted);
        let oldest_gone = at(1_000 * (deleted / CHUNK as u64) as i64 + 1);
        assert_eq!(count(db, target, oldest_gone).await, 0, "oldest first");
    }
    assert!(batches >= OLD / CHUNK, "{batches} batches");
    assert_eq!(deleted, OLD as u64);
    assert_eq!(
        snapshot(db, &kept).await,
        before,
        "newer and live jobs untouched"
    );
    assert_eq!(rows_in(db, "idem_job").await, 100);
    // A completed attempt is its job's row: the recent jobs' histories come from them.
    assert_eq!(rows_in(db, "idem_job_attempt").await, 0);
    for job in kept.iter().filter(|j| j.queue == "recent") {
        let history = attempts(db, job.id).await;
        assert_eq!(history.len(), 1, "job {}: {history:?}", job.id);
        assert_eq!(history[0].outcome, idem_store::AttemptOutcome::Completed);
    }
}

/// `n` completed jobs of `queue`, inserted in one statement, claimed and completed
/// `chunk` at a time; chunk `c` is finalized at `at(first_ms * (c + 1))`. Returns their
/// claimed rows (for their ids).
async fn fill_finished(
    db: &TestDb,
    queue: &str,
    n: usize,
    chunk: usize,
    first_ms: i64,
) -> Vec<JobRow> {
    let history = (0..n).map(|_| job_in(queue, "history")).collect();
    insert(db, history, t0()).await;
    let mut out = Vec::with_capacity(n);
    for c in 0..n / chunk {
        let claimed = claim(db, queue, chunk as u32, t0()).await;
        assert_eq!(claimed.len(), chunk, "claiming chunk {c}");
        let when = at(first_ms * (c as i64 + 1));
        let params = JobCompleteMany {
            results: Vec::new(),
            leases: claimed.iter().map(JobRow::lease_token).collect(),
            now: Some(when),
        };
        let done = db.store.job_complete_many(params).await.expect("complete");
        assert_eq!(done.len(), chunk, "completing chunk {c}");
        out.extend(claimed);
    }
    out
}

/// A purged job frees the enqueue key it still held (even inside the key's window, which
/// a valid retention never allows): the next insert with that key is a new job, not an
/// error about a key whose job is gone.
pub async fn purge_of_a_job_frees_its_enqueue_key(db: &TestDb) {
    let first = enqueue_one(db, keyed("q", "keyed", "k"), t0()).await;
    let claimed = claim(db, "q", 1, t0()).await;
    assert_eq!(claimed.len(), 1);
    complete(db, claimed[0].lease_token(), at(1))
        .await
        .expect("complete");
    assert_eq!(purge(db, PurgeTarget::FinishedJobs, at(2), 10).await, 1);
    let again = enqueue_one(db, keyed("q", "keyed", "k"), at(3)).await;
    assert!(!again.deduplicated, "the purged job's key is free");
    assert_ne!(again.job.id, first.job.id);
    let repeat = enqueue_one(db, keyed("q", "keyed", "k"), at(4)).await;
    assert!(repeat.deduplicated);
    assert_eq!(repeat.job.id, again.job.id);
}

/// Starts a purge of up to 10 records of `target` older than `before` on another
/// connection; returns once the task runs.
async fn spawn_purge(
    db: &TestDb,
    target: PurgeTarget,
    before: Timestamp,
) -> tokio::task::JoinHandle<idem_store::StoreResult<u64>> {
    let store = db.store.clone();
    let params = Purge {
        target,
        before,
        limit: 10,
    };
    spawn_started(async move { store.purge(params).await }).await
}

/// A purge that picked a dead job past its retention while an operator's retry of it
/// was in flight leaves the job alone once the retry commits: on PostgreSQL the delete
/// waits for the retried row and re-checks state and finalization on it (a decision
/// made in a subquery would not be re-checked), on SQLite the purge queues behind the
/// retry. The job, its history and its enqueue key survive.
pub async fn purge_spares_a_dead_job_retried_meanwhile(db: &TestDb) {
    let held = enqueue_one(db, keyed("rd", "dead", "rd-1"), t0()).await.job;
    let claimed = claim(db, "rd", 1, t0()).await;
    assert_eq!(ids(&claimed), vec![held.id]);
    fail(db, claimed[0].lease_token(), None, at(1_000))
        .await
        .expect("fail to dead");
    let mut retry = db.store.begin().await.expect("begin");
    let params = JobRetry {
        ids: vec![held.id],
        now: Some(at(5_000)),
    };
    let retried = retry.job_retry(params).await.expect("job_retry");
    assert_eq!(ids(&retried), vec![held.id]);
    let purge = spawn_purge(db, PurgeTarget::DeadJobs, at(10_000)).await;
    assert_waits_for(db, &mut retry, &purge).await;
    retry.commit().await.expect("commit the retry");
    let purged = within(30, "the purge", purge).await.expect("purge task");
    assert_eq!(purged.expect("purge"), 0, "the retried job is not dead");
    assert_eq!(get(db, held.id).await.state, JobState::Available);
    assert_eq!(attempts(db, held.id).await.len(), 1, "its history is kept");
    let again = enqueue_one(db, keyed("rd", "dead", "rd-1"), at(6_000)).await;
    assert!(again.deduplicated, "its enqueue key is kept");
    assert_eq!(again.job.id, held.id);
}

/// A purge that picked an enqueue key past its window while a new enqueue was taking the
/// key over (with a fresh time) leaves the key to the new job once that commits: the
/// next enqueue with the key is deduplicated to it, never a second job.
pub async fn purge_spares_an_enqueue_key_taken_over_meanwhile(db: &TestDb) {
    let first = enqueue_one(db, keyed("rk", "first", "rk-1"), t0()).await;
    finish(db, &first).await;
    let later = at(WINDOW_MS + 1_000);
    let mut take = db.store.begin().await.expect("begin");
    let taken = take
        .job_insert(enqueue_params(vec![keyed("rk", "second", "rk-1")], later))
        .await
        .expect("job_insert")
        .remove(0);
    assert!(!taken.deduplicated, "the lapsed key goes to the new job");
    let purge = spawn_purge(db, PurgeTarget::EnqueueKeys, at(1_000)).await;
    assert_waits_for(db, &mut take, &purge).await;
    take.commit().await.expect("commit the take-over");
    let purged = within(30, "the purge", purge).await.expect("purge task");
    assert_eq!(purged.expect("purge"), 0, "the key was taken over");
    let again = enqueue_one(db, keyed("rk", "third", "rk-1"), at(WINDOW_MS + 2_000)).await;
    assert!(again.deduplicated, "the key still deduplicates");
    assert_eq!(again.job.id, taken.job.id);
}

/// Which statement removes the old holder of a key being taken over.
#[derive(Clone, Copy)]
enum Remover {
    /// The purge of finished jobs (the holder completed).
    Purge,
    /// The operator's discard (the holder dead).
    Discard,
}

/// A job whose lapsed enqueue key a new enqueue is taking over is removed (purged or
/// discarded) meanwhile: the statement deletes the job and "its" key, but the key is
/// no longer its own once the take-over commits. PostgreSQL: the key's delete waits for
/// the take-over and re-checks `job_id` against the new row version; SQLite: the remover
/// queues behind the take-over. The key stays with the new job, which the next enqueue
/// with it is deduplicated to.
async fn key_taken_over_while_its_old_job_goes(db: &TestDb, remover: Remover) {
    let old = enqueue_one(db, keyed("tk", "first", "tk-1"), t0())
        .await
        .job;
    let claimed = claim(db, "tk", 1, t0()).await;
    assert_eq!(ids(&claimed), vec![old.id]);
    let lease = claimed[0].lease_token();
    match remover {
        Remover::Purge => complete(db, lease, at(1_000)).await.map(|_| ()),
        Remover::Discard => fail(db, lease, None, at(1_000)).await.map(|_| ()),
    }
    .expect("finish the old job");
    let mut take = db.store.begin().await.expect("begin");
    let params = enqueue_params(vec![keyed("tk", "second", "tk-1")], at(WINDOW_MS + 1_000));
    let taken = take.job_insert(params).await.expect("job_insert").remove(0);
    assert!(!taken.deduplicated, "the lapsed key goes to the new job");
    let store = db.store.clone();
    let old_id = old.id;
    let removing = spawn_started(async move {
        match remover {
            Remover::Purge => {
                let params = Purge {
                    target: PurgeTarget::FinishedJobs,
                    before: at(2_000),
                    limit: 10,
                };
                store.purge(params).await
            }
            Remover::Discard => {
                let params = JobDiscard { ids: vec![old_id] };
                store.job_discard(params).await.map(|ids| ids.len() as u64)
            }
        }
    })
    .await;
    assert_waits_for(db, &mut take, &removing).await;
    take.commit().await.expect("commit the take-over");
    let removed = within(30, "the removal", removing)
        .await
        .expect("removal task");
    assert_eq!(removed.expect("remove"), 1, "the old job goes");
    assert!(db.store.job_get(old.id).await.expect("job_get").is_none());
    let again = enqueue_one(db, keyed("tk", "third", "tk-1"), at(WINDOW_MS + 2_000)).await;
    assert!(
        again.deduplicated,
        "the key taken over was deleted with the old job: {again:?}"
    );
    assert_eq!(again.job.id, taken.job.id);
}

/// [`key_taken_over_while_its_old_job_goes`] with the purge of finished jobs.
pub async fn purge_of_a_job_spares_its_key_taken_over_meanwhile(db: &TestDb) {
    key_taken_over_while_its_old_job_goes(db, Remover::Purge).await;
}

/// [`key_taken_over_while_its_old_job_goes`] with an operator's discard.
pub async fn discard_of_a_job_spares_its_key_taken_over_meanwhile(db: &TestDb) {
    key_taken_over_while_its_old_job_goes(db, Remover::Discard).await;
}
