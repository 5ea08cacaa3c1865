//! Attacks on batches (review of the fan-in change): each case tries to make the seam
//! count a child twice or not at all, enqueue two successors or none, let a stale claim
//! count, lose a completion, or deadlock, through the operations a producer, a worker
//! and an operator really call. A case that demonstrates a defect fails; a case whose
//! attack held passes, and its doc comment says what it tried.
//!
//! Races are replayed deterministically as in `batch.rs`: one transaction holds the row
//! (or a gate holds a statement at a chosen point, `pg_gate_after_insert` and
//! `pg_gate_after_update`), the racer is shown blocked on it through the server's lock
//! graph, and only then is the holder released. Time is injected everywhere.

use idem_store::batch::shard_of;
use idem_store::{
    BatchAdd, BatchCreate, BatchState, JobComplete, JobCompleteMany, JobInsert, JobRescue,
    JobRetry, JobRow, JobState, NewJob, OnDead, Purge, PurgeTarget, StoreError, StoreResult,
    Timestamp,
};
use serde_json::json;

use super::batch::{
    add, batch, children_of, counts_of, create, outcome, spawn_complete, spec, successors,
};
use super::enqueue_key::keyed;
use crate::TestDb;
use crate::fixture::{
    LEASE_MS, all_jobs, assert_lease_lost, assert_waits_for, at, cancel, claim, complete, fail,
    get, ids, insert, job_in, pg_gate_after_insert, pg_gate_after_update, pg_wait_until_waiting,
    spawn_started, t0,
};
use crate::harness::within;

/// The enqueue-key window of every batch: a day.
const WINDOW_MS: i64 = 86_400_000;
/// The queue successors wait in, apart from the children's.
const AFTER: &str = "after";
/// The kind of the successor.
const DONE: &str = "batch-done";

/// Retries `ids` at `now` as an operator does.
async fn retry(db: &TestDb, ids: Vec<i64>, now: Timestamp) -> StoreResult<Vec<JobRow>> {
    let params = JobRetry {
        ids,
        now: Some(now),
    };
    db.store.job_retry(params).await
}

/// PostgreSQL only: returns once some backend waits for a lock that backend `pid` holds.
async fn pg_wait_until_someone_waits_for(db: &TestDb, pid: i64) {
    let sql = "SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))";
    loop {
        let rows = db.store.query(sql, &[pid.into()]).await.expect("locks");
        if rows[0][0].as_i64().is_some_and(|n| n > 0) {
            return;
        }
        tokio::task::yield_now().await;
    }
}

/// DEFECT (both stores). Attack: `batch_add` in a caller's transaction (what
/// `Idem::batch_add_tx` and `StoreTx::batch_add` offer) to a batch that was sealed,
/// then the producer's natural fallback in the same transaction: a new batch for the
/// late children, and commit. The seam says a refused add writes nothing (`batch::add`:
/// "refused, and all of it rolls back"). Found: `add` inserts the children and adds to
/// the shard totals *before* it finds the batch sealed, and the refusal is a plain
/// `Err` that leaves the transaction usable, so the commit keeps them: the sealed batch
/// gains two children it never accepted (total 1 → 3: it is sealed and waits for them,
/// or, had it been finished, would show unfinished children), and the late jobs exist
/// twice. The same holds for an add to a missing batch id (orphan children and shard
/// rows a batch created later with that id would inherit).
pub async fn batch_attack_refused_add_in_a_callers_transaction_writes_nothing(db: &TestDb) {
    let sealed = create(db, vec![job_in("k", "first")], true, t0())
        .await
        .batch;
    assert_eq!(sealed.state, BatchState::Sealed);
    let before = all_jobs(db).await.len();
    let late = || vec![job_in("late", "late-0"), job_in("late", "late-1")];
    let mut tx = db.store.begin().await.expect("begin");
    let params = BatchAdd {
        batch_id: sealed.id,
        children: late(),
        key_window_ms: WINDOW_MS,
        now: Some(at(1_000)),
    };
    let refused = tx.batch_add(params).await;
    assert!(
        matches!(refused, Err(StoreError::Conflict(_))),
        "the add to a sealed batch is refused: {refused:?}"
    );
    let fallback = BatchCreate {
        batch: spec(OnDead::Summary, at(1_000)),
        children: late(),
        seal: true,
    };
    let fresh = tx
        .batch_create(fallback)
        .await
        .expect("a new batch instead");
    tx.commit().await.expect("commit");
    assert_eq!(
        counts_of(db, sealed.id).await,
        (BatchState::Sealed, 1, 0, 0, 0),
        "the sealed batch took no child: its children are {:?}",
        children_of(db, sealed.id)
            .await
            .iter()
            .map(|c| c.kind.clone())
            .collect::<Vec<_>>()
    );
    assert_eq!(fresh.batch.total, 2);
    assert_eq!(
        all_jobs(db).await.len(),
        before + 2,
        "the late children exist once, in the new batch"
    );
}

/// DEFECT (both stores). Attack: a producer's own job (library or operator; an HTTP
/// client's keys live in its namespace) enqueued with the key `batch:{id}:done` in the
/// successor's queue before the batch finishes, e.g. an application that names its own
/// batches that way. Found: the change that finishes the batch enqueues the successor
/// through the enqueue-key table, finds the key held and takes the holder as the
/// successor (`successor_job_id` names the producer's job): the batch is finished, every
/// child finished, and its successor never exists or runs. The batch row's lock and
/// state already make the successor one per batch; the key lives in the users' key
/// namespace, which reserves nothing.
pub async fn batch_attack_successor_key_held_by_a_producers_job_still_runs_the_successor(
    db: &TestDb,
) {
    let b = create(db, vec![job_in("k", "child")], true, t0())
        .await
        .batch;
    let key = format!("batch:{}:done", b.id);
    let squat = JobInsert {
        jobs: vec![keyed(AFTER, "producers-own-job", &key)],
        key_window_ms: WINDOW_MS,
        now: Some(at(1)),
    };
    db.store
        .job_insert(squat)
        .await
        .expect("the producer's job");
    let child = claim(db, "k", 1, at(2)).await.remove(0);
    complete(db, child.lease_token(), at(3))
        .await
        .expect("the last child completes");
    let done = batch(db, b.id).await;
    assert_eq!(done.state, BatchState::Finished);
    let named = match done.successor_job_id {
        Some(id) => Some(get(db, id).await.kind),
        None => None,
    };
    let next = successors(db, b.id).await;
    assert_eq!(
        next.len(),
        1,
        "the batch's successor ({DONE}) exists; the batch names a job of kind {named:?}"
    );
    assert_eq!(done.successor_job_id, Some(next[0].id));
    assert_eq!(next[0].kind, DONE);
}

/// DEFECT (PostgreSQL). Attack: an operator retries a dead child while the last child's
/// completion, which found the sealed batch due under its lock, is enqueueing the
/// successor (held by a gate at the successor's insert). The retry needs neither the
/// batch row nor the completing child's shard, so it commits in between. Found: the
/// completion's `batch/finish.sql` re-reads the shards in a new statement, sees the
/// retried child's shard incomplete, matches no row, and `finish_if_due` turns that into
/// `StoreError::Database("batch … changed while its row was locked …")`: the whole
/// completion of a healthy child rolls back, with an error the worker's completer does
/// not retry (the job is left running until its lease expires, then runs again). Either
/// order of the two would be consistent (finished with the retried child reopened after,
/// as after any retry past the successor; or not due); failing the completion is not.
pub async fn batch_attack_retry_racing_the_last_completion_does_not_fail_it(db: &TestDb) {
    let kids = vec![job_in("k", "dies"), job_in("k", "last")];
    let id = create(db, kids, true, t0()).await.batch.id;
    let run = claim(db, "k", 2, t0()).await;
    let (dead, last) = (&run[0], &run[1]);
    assert_ne!(shard_of(dead.id), shard_of(last.id), "two shards");
    fail(db, dead.lease_token(), None, at(1))
        .await
        .expect("the first child dies");
    assert_eq!(counts_of(db, id).await, (BatchState::Sealed, 2, 0, 1, 0));
    let mut gate = pg_gate_after_insert(db, "idem_job").await;
    let racer = spawn_complete(db, last.lease_token(), at(2)).await;
    assert_waits_for(db, &mut gate, &racer).await;
    let store = db.store.clone();
    let params = JobRetry {
        ids: vec![dead.id],
        now: Some(at(3)),
    };
    let retry_racer = spawn_started(async move { store.job_retry(params).await }).await;
    // Since the fix the retry takes the batch row after its count, so it waits for the
    // completion that holds it.
    let waiting = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%FROM idem_batch\n%' \
                   AND query LIKE '%FOR NO KEY UPDATE%' AND cardinality(pg_blocking_pids(pid)) > 0";
    within(30, "the retry waiting for the batch row", async {
        while db
            .store
            .query(waiting, &[])
            .await
            .expect("pg_stat_activity")[0][0]
            .as_i64()
            != Some(1)
        {
            tokio::task::yield_now().await;
        }
    })
    .await;
    gate.commit().await.expect("open the gate");
    let done = outcome(racer).await;
    assert!(
        done.is_ok(),
        "the last child's completion was rolled back: {done:?}"
    );
    let retried = outcome(retry_racer).await.expect("the retry after it");
    assert_eq!(ids(&retried), vec![dead.id]);
    assert_eq!(get(db, last.id).await.state, JobState::Completed);
    let b = batch(db, id).await;
    assert_eq!(
        (b.state, b.total, b.completed, b.dead),
        (BatchState::Finished, 2, 1, 0),
        "finished with the retried child reopened after, as any retry past the successor"
    );
    assert_eq!(successors(db, id).await.len(), 1);
}

/// DEFECT (PostgreSQL; lock order). Attack: a purge of finished batches while a child of
/// a finished batch (reopened by an operator's retry after the successor ran, claimed
/// again) completes. The completion's `batch/count.sql` locks the child's shard (held
/// there by a gate after its update); the purge deletes the batch row, then waits for
/// that shard in the same statement; the completion, released, then asks for the batch
/// row (`batch/lock.sql`: its shard is complete). Found: the two lock the batch row and
/// its shards in opposite orders (purge: batch then shards; every count: shards then
/// batch; DESIGN 7a asks for one order), so PostgreSQL aborts one of them with
/// `deadlock_detected` (`Busy`) after `deadlock_timeout`.
pub async fn batch_attack_purge_racing_a_reopened_childs_completion_does_not_deadlock(db: &TestDb) {
    let id = create(db, vec![job_in("k", "child")], true, t0())
        .await
        .batch
        .id;
    let first = claim(db, "k", 1, t0()).await.remove(0);
    fail(db, first.lease_token(), None, at(1))
        .await
        .expect("the child dies");
    assert_eq!(counts_of(db, id).await, (BatchState::Finished, 1, 0, 1, 0));
    retry(db, vec![first.id], at(2))
        .await
        .expect("an operator retries the dead child");
    let again = claim(db, "k", 1, at(3)).await.remove(0);
    assert_eq!((again.id, again.fence), (first.id, 2));
    let gate = pg_gate_after_update(db, "idem_batch_shard").await;
    let store = db.store.clone();
    let (pid_tx, pid_rx) = tokio::sync::oneshot::channel();
    let lease = again.lease_token();
    let completion = tokio::spawn(async move {
        let mut tx = store.begin().await?;
        let pid = tx.query("SELECT pg_backend_pid()", &[]).await?;
        let _ = pid_tx.send(pid[0][0].as_i64().expect("a pid"));
        let params = JobComplete {
            lease,
            result: None,
            now: Some(at(4)),
        };
        tx.job_complete(params).await?;
        tx.commit().await
    });
    let pid = within(30, "the completion's pid", pid_rx)
        .await
        .expect("pid");
    within(
        30,
        "the completion at the gate",
        pg_wait_until_waiting(db, pid),
    )
    .await;
    let store = db.store.clone();
    let params = Purge {
        target: PurgeTarget::Batches,
        before: at(1_000_000),
        limit: 10,
    };
    let purge = spawn_started(async move { store.purge(params).await }).await;
    let blocked = pg_wait_until_someone_waits_for(db, pid);
    within(30, "the purge waiting for the shard", blocked).await;
    gate.commit().await.expect("open the gate");
    let completed = within(30, "the completion", completion).await;
    let purged = outcome(purge).await;
    assert!(
        matches!(completed, Ok(Ok(()))) && purged.is_ok(),
        "completion: {completed:?}; purge: {purged:?}"
    );
}

/// DEFECT (PostgreSQL; lock order). Attack: dynamic fan-out, a child of an open batch
/// adding siblings to its own batch and completing in one transaction (its effect
/// transaction, through `EffectTx::store_tx()`'s `batch_add` and `tx.complete()`),
/// while a producer adds children to the same batch. The child's add locks its new
/// sibling's shard and the batch row; the producer's add locks shards in order up to
/// that shard and waits; the child's completion then needs its own shard, lower than
/// the sibling's and already held by the producer. Found: `batch::add`'s rule (shards
/// before the batch row, in shard order) holds per operation but not across two
/// operations of one transaction: the shards are taken out of order, and PostgreSQL
/// aborts one of the two with `deadlock_detected`.
pub async fn batch_attack_fan_out_add_then_complete_in_one_tx_does_not_deadlock(db: &TestDb) {
    let created = create(db, vec![job_in("k", "parent")], false, t0()).await;
    let id = created.batch.id;
    let parent = claim(db, "k", 1, t0()).await.remove(0);
    let mut tx = db.store.begin().await.expect("begin");
    let params = BatchAdd {
        batch_id: id,
        children: vec![job_in("k", "sibling")],
        key_window_ms: WINDOW_MS,
        now: Some(at(1)),
    };
    let sibling = tx
        .batch_add(params)
        .await
        .expect("the child adds a sibling");
    let sibling_id = sibling.children[0].job.id;
    assert!(
        shard_of(parent.id) < shard_of(sibling_id),
        "the parent's shard comes first: {} {}",
        parent.id,
        sibling_id
    );
    let store = db.store.clone();
    let params = BatchAdd {
        batch_id: id,
        children: (0..16).map(|n| job_in("k", &format!("more-{n}"))).collect(),
        key_window_ms: WINDOW_MS,
        now: Some(at(2)),
    };
    let producer = spawn_started(async move { store.batch_add(params).await }).await;
    assert_waits_for(db, &mut tx, &producer).await;
    let params = JobComplete {
        lease: parent.lease_token(),
        result: None,
        now: Some(at(3)),
    };
    let completed = within(30, "the child's completion", tx.job_complete(params)).await;
    let committed = match completed {
        Ok(_) => tx.commit().await,
        Err(e) => Err(e),
    };
    let added = outcome(producer).await;
    assert!(
        committed.is_ok() && added.is_ok(),
        "the child's add and completion: {committed:?}; the producer's add: {:?}",
        added.map(|a| a.batch.total)
    );
}

/// HELD (both stores). Attack: two operators retry the same dead child at once (the
/// second while the first's transaction holds the row): `job/retry.sql`'s prior-state
/// CTE on PostgreSQL must not read `dead` for the second one and give the count back
/// twice. The second waits, re-checks the row (now available) and retries nothing; the
/// dead count moves once.
pub async fn batch_attack_two_retries_of_a_dead_child_at_once_count_once(db: &TestDb) {
    let kids = vec![job_in("k", "dies"), job_in("k", "waits")];
    let id = create(db, kids, true, t0()).await.batch.id;
    let dead = claim(db, "k", 1, t0()).await.remove(0);
    fail(db, dead.lease_token(), None, at(1))
        .await
        .expect("dies");
    assert_eq!(counts_of(db, id).await, (BatchState::Sealed, 2, 0, 1, 0));
    let mut tx = db.store.begin().await.expect("begin");
    let params = JobRetry {
        ids: vec![dead.id],
        now: Some(at(2)),
    };
    let first = tx.job_retry(params).await.expect("retry in tx");
    assert_eq!(ids(&first), vec![dead.id]);
    let store = db.store.clone();
    let params = JobRetry {
        ids: vec![dead.id, dead.id],
        now: Some(at(3)),
    };
    let racer = spawn_started(async move { store.job_retry(params).await }).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit the first retry");
    let second = outcome(racer).await.expect("the second retry");
    assert!(second.is_empty(), "nothing left to retry: {second:?}");
    assert_eq!(counts_of(db, id).await, (BatchState::Sealed, 2, 0, 0, 0));
    let shards = "SELECT min(dead), min(completed), min(cancelled) FROM idem_batch_shard \
                  WHERE batch_id = $1";
    let row = db.store.query(shards, &[id.into()]).await.expect("shards");
    assert_eq!(row[0][0].as_i64(), Some(0), "no shard went negative");
}

/// HELD (both stores). Attack: an operator's cancel racing the last child's completion,
/// which holds the child's row, its shard and the batch row (its successor enqueued, not
/// committed). The cancel waits, finds the child completed and is refused (`Conflict`):
/// the child counts once, as completed, and the batch has one successor.
pub async fn batch_attack_cancel_racing_the_last_completion_counts_once(db: &TestDb) {
    let id = create(db, vec![job_in("k", "last")], true, t0())
        .await
        .batch
        .id;
    let child = claim(db, "k", 1, t0()).await.remove(0);
    let mut tx = db.store.begin().await.expect("begin");
    let params = JobComplete {
        lease: child.lease_token(),
        result: Some(json!({"n": 1})),
        now: Some(at(1)),
    };
    tx.job_complete(params).await.expect("complete in tx");
    let store = db.store.clone();
    let params = idem_store::JobCancel {
        job_id: child.id,
        now: Some(at(2)),
    };
    let racer = spawn_started(async move { store.job_cancel(params).await }).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit the completion");
    let refused = outcome(racer).await;
    assert!(
        matches!(refused, Err(StoreError::Conflict(_))),
        "{refused:?}"
    );
    assert_eq!(counts_of(db, id).await, (BatchState::Finished, 1, 1, 0, 0));
    assert_eq!(successors(db, id).await.len(), 1);
    let late = cancel(db, child.id, at(3)).await;
    assert!(matches!(late, Err(StoreError::Conflict(_))), "{late:?}");
    assert_eq!(counts_of(db, id).await, (BatchState::Finished, 1, 1, 0, 0));
}

/// HELD (both stores). Attack: a stale worker whose lease expired completes through the
/// store's one-statement path while the rescuer's transaction, holding the child's row,
/// makes it dead (its only attempt used). The one-statement path leaves a child alone
/// and the transaction it falls back to waits for the rescue, then finds the child dead
/// and is refused (`LeaseLost`); the child counts once, as dead, and the batch has one
/// successor. The stale claim's `job_complete_many` after that counts nothing either.
pub async fn batch_attack_stale_completion_racing_the_rescue_counts_once(db: &TestDb) {
    let child = NewJob {
        max_attempts: 1,
        ..job_in("k", "lapses")
    };
    let id = create(db, vec![child], true, t0()).await.batch.id;
    let run = claim(db, "k", 1, t0()).await.remove(0);
    let expired = at(LEASE_MS + 1);
    let mut tx = db.store.begin().await.expect("begin");
    let params = JobRescue {
        limit: 10,
        retry_in_ms: 0,
        max_attempts: None,
        now: Some(expired),
    };
    let rescued = tx.job_rescue(params).await.expect("rescue in tx");
    assert_eq!(ids(&rescued), vec![run.id]);
    assert_eq!(rescued[0].state, JobState::Dead);
    let racer = spawn_complete(db, run.lease_token(), at(LEASE_MS + 2)).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit the rescue");
    assert_lease_lost(outcome(racer).await, run.lease_token());
    let again = JobCompleteMany {
        leases: vec![run.lease_token()],
        results: vec![(run.id, json!("stale"))],
        now: Some(at(LEASE_MS + 3)),
    };
    let done = db
        .store
        .job_complete_many(again)
        .await
        .expect("complete many");
    assert!(done.is_empty(), "{done:?}");
    assert_eq!(counts_of(db, id).await, (BatchState::Finished, 1, 0, 1, 0));
    assert_eq!(successors(db, id).await.len(), 1);
    assert_eq!(get(db, run.id).await.result, None, "no stale result kept");
}

/// HELD (both stores). Attack: one `job_complete_many` naming the same child's lease
/// twice (and two results for it) beside its sibling: the locked rows of
/// `job/complete_many.sql` (PostgreSQL) or the `IN` list (SQLite) must complete and
/// count the child once. Each child counts once; one successor.
pub async fn batch_attack_complete_many_with_a_lease_twice_counts_once(db: &TestDb) {
    let kids = vec![job_in("k", "a"), job_in("k", "b")];
    let id = create(db, kids, true, t0()).await.batch.id;
    let run = claim(db, "k", 2, t0()).await;
    let (a, b) = (run[0].lease_token(), run[1].lease_token());
    let params = JobCompleteMany {
        leases: vec![a, a, b],
        results: vec![(a.job_id, json!(1)), (a.job_id, json!(2))],
        now: Some(at(1)),
    };
    let mut done = db.store.job_complete_many(params).await.expect("complete");
    done.sort_unstable();
    done.dedup();
    assert_eq!(done, vec![a.job_id, b.job_id]);
    assert_eq!(counts_of(db, id).await, (BatchState::Finished, 2, 2, 0, 0));
    assert_eq!(successors(db, id).await.len(), 1);
    let shards = "SELECT max(completed - total) FROM idem_batch_shard WHERE batch_id = $1";
    let row = db.store.query(shards, &[id.into()]).await.expect("shards");
    assert_eq!(
        row[0][0].as_i64(),
        Some(0),
        "no shard counted past its total"
    );
}

/// FIXED (both stores). Attack: a child added to a second batch with the enqueue key of
/// a child of the first batch dedups into that job of the other batch. Before the fix it
/// was returned deduplicated and counted in no shard of the second batch, which could
/// then finish (and run its successor) without it: the mechanism behind the retried
/// fan-out of the engine's `batch_attack`. Now the add is refused (`Conflict`, naming the
/// holder) and writes nothing; the first batch still finishes with its own child.
pub async fn batch_attack_child_deduplicated_into_another_batch_counts_in_its_own(db: &TestDb) {
    let one = create(db, vec![keyed("k", "x", "shared")], false, t0()).await;
    let two = create(db, vec![], false, t0()).await.batch;
    let before = all_jobs(db).await;
    let refused = add(
        db,
        two.id,
        vec![job_in("k", "y"), keyed("k", "x", "shared")],
        at(1),
    )
    .await;
    match refused {
        Err(StoreError::Conflict(msg)) => assert!(msg.contains("held by job"), "{msg}"),
        other => panic!("expected a Conflict, got {other:?}"),
    }
    assert_eq!(all_jobs(db).await, before, "the refused add wrote nothing");
    assert_eq!(batch(db, two.id).await.total, 0);
    for b in [one.batch.id, two.id] {
        db.store
            .batch_seal(idem_store::BatchSeal {
                batch_id: b,
                now: Some(at(2)),
            })
            .await
            .expect("seal");
    }
    for child in claim(db, "k", 2, at(3)).await {
        complete(db, child.lease_token(), at(4))
            .await
            .expect("complete");
    }
    assert_eq!(
        counts_of(db, one.batch.id).await,
        (BatchState::Finished, 1, 1, 0, 0)
    );
    assert_eq!(successors(db, one.batch.id).await.len(), 1);
}

/// FIXED in the engine (PostgreSQL). Attack: one job's result holds a string with U+0000
/// (valid JSON, which PostgreSQL's `jsonb` refuses), completed in one `job_complete_many`
/// with another job, as the worker's completer flushes jobs together. Found: the one
/// statement failed and neither job completed, and the engine's completer failed the
/// whole flush. Now `JobContext::set_result` refuses a NUL character before anything is
/// sent, and the completer completes the jobs of a refused flush one by one; the store's
/// call itself stays atomic: refused as a whole, nothing written (checked here).
pub async fn batch_attack_a_result_the_store_refuses_loses_no_other_completion(db: &TestDb) {
    insert(db, vec![job_in("p", "poisoned"), job_in("p", "fine")], t0()).await;
    let run = claim(db, "p", 2, t0()).await;
    let (poisoned, fine) = (run[0].lease_token(), run[1].lease_token());
    let params = JobCompleteMany {
        leases: vec![poisoned, fine],
        results: vec![
            (poisoned.job_id, json!({"note": "a\u{0}b"})),
            (fine.job_id, json!({"n": 1})),
        ],
        now: Some(at(1)),
    };
    let done = db.store.job_complete_many(params).await;
    let states = [
        get(db, poisoned.job_id).await.state,
        get(db, fine.job_id).await.state,
    ];
    match db.backend {
        idem_store::Backend::Postgres => {
            assert!(done.is_err(), "refused as a whole: {done:?}");
            assert_eq!(states, [JobState::Running; 2], "nothing written");
        }
        idem_store::Backend::Sqlite => {
            assert_eq!(
                done.map(|mut d| {
                    d.sort_unstable();
                    d
                })
                .ok(),
                Some(vec![poisoned.job_id, fine.job_id])
            );
            assert_eq!(states, [JobState::Completed; 2]);
        }
    }
}
