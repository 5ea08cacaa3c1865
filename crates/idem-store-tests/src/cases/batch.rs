//! Batches: N child jobs and one successor. A batch counts its children as they are
//! added (`total`) and as they reach a final state (`completed`, `dead`, `cancelled`),
//! in the transaction that moves each child, whichever operation moves it
//! (`job_complete`, `job_complete_many`, `job_fail`, `job_rescue`, `job_cancel`, and
//! `job_retry` backwards). The change that leaves a sealed batch with every child
//! finished enqueues its successor (the failure successor instead when children died and
//! the policy says so) under the enqueue key `batch:{id}:done`, and marks the batch
//! `finished`; nothing enqueues a second one: not a stale claim, not an operator's retry
//! after the fact, not two last children completing at once. Children are added only
//! while the batch is open, and a refused add writes nothing.
//!
//! The counts live in shards (a child's shard is its id modulo `SHARDS`); a change that
//! completes a shard locks the batch row and reads every shard afresh. The races run
//! last, replayed deterministically without sleeps: a transaction holds the batch's row
//! (or the shard the racer needs), the racer is shown to wait for it ([`assert_waits_for`]: on
//! PostgreSQL the server reports it blocked on that transaction, on SQLite it queues for
//! the single writer), and only then does the transaction commit.

use std::collections::HashMap;

use idem_store::{
    BatchAdd, BatchAdded, BatchChildren, BatchCreate, BatchInsert, BatchList, BatchRow, BatchSeal,
    BatchState, JobComplete, JobCompleteMany, JobRescue, JobRetry, JobRow, JobState, LeaseToken,
    NewJob, OnDead, Purge, PurgeTarget, StoreError, StoreResult, Timestamp,
};
use serde_json::{Value, json};

use super::enqueue_key::keyed;
use crate::TestDb;
use crate::fixture::{
    LEASE_MS, all_jobs, assert_lease_lost, assert_waits_for, at, cancel, claim, complete, fail,
    get, ids, insert_one, job_in, spawn_started, t0,
};
use crate::harness::within;

/// The enqueue-key window of every batch: a day.
const WINDOW_MS: i64 = 86_400_000;
/// The queue successors wait in: apart from the children's, so no claim of children
/// takes one.
const AFTER: &str = "after";
/// The kind of the successor.
const DONE: &str = "batch-done";
/// The kind of the failure successor.
const FAILED: &str = "batch-failed";

/// The successor every batch names: [`DONE`] in [`AFTER`], with args and a priority of
/// its own.
fn successor() -> NewJob {
    NewJob {
        args: json!({"report": "children"}),
        priority: 3,
        ..job_in(AFTER, DONE)
    }
}

/// The failure successor: [`FAILED`] in [`AFTER`].
fn failure_successor() -> NewJob {
    NewJob {
        args: json!({"alert": "oncall"}),
        ..job_in(AFTER, FAILED)
    }
}

/// A batch with `on_dead` and [`successor`], created at `now`; it names the failure
/// successor only under [`OnDead::FailureSuccessor`].
pub(super) fn spec(on_dead: OnDead, now: Timestamp) -> BatchInsert {
    BatchInsert {
        on_dead,
        successor: successor(),
        failure_successor: (on_dead == OnDead::FailureSuccessor).then(failure_successor),
        key_window_ms: WINDOW_MS,
        principal: None,
        now: Some(now),
    }
}

/// `n` children in `queue`: kinds `child-0`, `child-1`, …, each with its index in its
/// args.
fn kids(queue: &str, n: usize) -> Vec<NewJob> {
    (0..n)
        .map(|i| NewJob {
            args: json!({ "i": i }),
            ..job_in(queue, &format!("child-{i}"))
        })
        .collect()
}

/// Creates a batch of `batch` with `children`, sealed if `seal`.
async fn create_with(
    db: &TestDb,
    batch: BatchInsert,
    children: Vec<NewJob>,
    seal: bool,
) -> BatchAdded {
    let params = BatchCreate {
        batch,
        children,
        seal,
    };
    db.store.batch_create(params).await.expect("batch_create")
}

/// Creates a batch with the default policy (summary) and `children` at `now`, sealed if
/// `seal`.
pub(super) async fn create(
    db: &TestDb,
    children: Vec<NewJob>,
    seal: bool,
    now: Timestamp,
) -> BatchAdded {
    create_with(db, spec(OnDead::Summary, now), children, seal).await
}

/// The params of an add of `children` to batch `batch_id` at `now`.
fn add_params(batch_id: i64, children: Vec<NewJob>, now: Timestamp) -> BatchAdd {
    BatchAdd {
        batch_id,
        children,
        key_window_ms: WINDOW_MS,
        now: Some(now),
    }
}

/// Adds `children` to batch `batch_id` at `now`.
pub(super) async fn add(
    db: &TestDb,
    batch_id: i64,
    children: Vec<NewJob>,
    now: Timestamp,
) -> StoreResult<BatchAdded> {
    db.store
        .batch_add(add_params(batch_id, children, now))
        .await
}

/// Seals batch `batch_id` at `now`.
async fn seal(db: &TestDb, batch_id: i64, now: Timestamp) -> StoreResult<BatchRow> {
    let params = BatchSeal {
        batch_id,
        now: Some(now),
    };
    db.store.batch_seal(params).await
}

/// The batch, which must exist.
pub(super) async fn batch(db: &TestDb, id: i64) -> BatchRow {
    db.store
        .batch_get(id)
        .await
        .expect("batch_get")
        .unwrap_or_else(|| panic!("batch {id} does not exist"))
}

/// Batches matching `params`, as listed.
async fn list(db: &TestDb, params: BatchList) -> Vec<BatchRow> {
    db.store.batch_list(params).await.expect("batch_list")
}

/// The ids of `batches`, in their order.
fn batch_ids(batches: &[BatchRow]) -> Vec<i64> {
    batches.iter().map(|b| b.id).collect()
}

/// A batch's `(state, total, completed, dead, cancelled)`.
fn counts(b: &BatchRow) -> (BatchState, i64, i64, i64, i64) {
    (b.state, b.total, b.completed, b.dead, b.cancelled)
}

/// The counts of batch `id` as stored now.
pub(super) async fn counts_of(db: &TestDb, id: i64) -> (BatchState, i64, i64, i64, i64) {
    counts(&batch(db, id).await)
}

/// A page of the children of batch `batch_id`.
async fn page(db: &TestDb, batch_id: i64, after_id: Option<i64>, limit: u32) -> Vec<JobRow> {
    let params = BatchChildren {
        batch_id,
        after_id,
        limit,
    };
    db.store
        .batch_children(params)
        .await
        .expect("batch_children")
}

/// Every child of batch `batch_id`, in id order.
pub(super) async fn children_of(db: &TestDb, batch_id: i64) -> Vec<JobRow> {
    page(db, batch_id, None, 10_000).await
}

/// How many children of batch `batch_id` are in each state; checks that no state comes
/// twice or with none.
async fn states(db: &TestDb, batch_id: i64) -> HashMap<JobState, i64> {
    let pairs = db.store.batch_states(batch_id).await.expect("batch_states");
    let map: HashMap<JobState, i64> = pairs.iter().copied().collect();
    assert_eq!(map.len(), pairs.len(), "each state once: {pairs:?}");
    assert!(
        pairs.iter().all(|(_, n)| *n > 0),
        "states with no child are left out: {pairs:?}"
    );
    map
}

/// The jobs that follow batch `batch_id` (`follows_batch`), oldest first.
pub(super) async fn successors(db: &TestDb, batch_id: i64) -> Vec<JobRow> {
    let mut jobs: Vec<JobRow> = all_jobs(db)
        .await
        .into_iter()
        .filter(|j| j.follows_batch == Some(batch_id))
        .collect();
    jobs.sort_by_key(|j| j.id);
    jobs
}

/// Asserts that `b` is finished with exactly one successor, of `kind`, enqueued when it
/// finished as the batch's successor (its key, `follows_batch`, in no batch); returns it.
async fn the_successor(db: &TestDb, b: &BatchRow, kind: &str) -> JobRow {
    assert_eq!(b.state, BatchState::Finished, "batch {}: {b:?}", b.id);
    let mut next = successors(db, b.id).await;
    assert_eq!(next.len(), 1, "successors of batch {}: {next:?}", b.id);
    let job = next.remove(0);
    assert_eq!(
        b.successor_job_id,
        Some(job.id),
        "the batch names its successor"
    );
    assert_eq!(job.kind, kind, "the successor's kind: {job:?}");
    assert_eq!(job.follows_batch, Some(b.id));
    assert_eq!(job.enqueue_key, Some(format!("batch:{}:done", b.id)));
    assert_eq!(job.batch_id, None, "a successor is no child");
    assert_eq!(
        Some(job.created_at),
        b.finished_at,
        "enqueued by the change that finished the batch"
    );
    job
}

/// Completes a claim at `now` with `result`; the row as returned.
async fn finish(db: &TestDb, lease: LeaseToken, result: Option<Value>, now: Timestamp) -> JobRow {
    let params = JobComplete {
        lease,
        result,
        now: Some(now),
    };
    db.store.job_complete(params).await.expect("job_complete")
}

/// Completes `leases` at `now` in one call with `results`; the ids completed, sorted.
async fn complete_many(
    db: &TestDb,
    leases: Vec<LeaseToken>,
    results: Vec<(i64, Value)>,
    now: Timestamp,
) -> Vec<i64> {
    let params = JobCompleteMany {
        leases,
        results,
        now: Some(now),
    };
    let mut done = db
        .store
        .job_complete_many(params)
        .await
        .expect("job_complete_many");
    done.sort_unstable();
    done
}

/// Rescues every lease expired at `now`, for a retry at once; the rows sorted by id.
async fn rescue(db: &TestDb, now: Timestamp) -> Vec<JobRow> {
    let params = JobRescue {
        limit: 100,
        retry_in_ms: 0,
        max_attempts: None,
        now: Some(now),
    };
    let mut rows = db.store.job_rescue(params).await.expect("job_rescue");
    rows.sort_by_key(|j| j.id);
    rows
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

/// The ids of the children an operation returned, in its order.
fn child_ids(added: &BatchAdded) -> Vec<i64> {
    added.children.iter().map(|e| e.job.id).collect()
}

/// A batch created open with children counts them and names itself on each; children
/// added later count too; sealing makes it `sealed` at `now` with no successor yet; and
/// `batch_get`, `batch_children` and `batch_states` read what the operations returned.
pub async fn batch_create_add_and_seal_count_the_children(db: &TestDb) {
    let created = create(db, kids("kids", 3), false, t0()).await;
    let b = &created.batch;
    assert_eq!(counts(b), (BatchState::Open, 3, 0, 0, 0));
    assert_eq!(
        (b.created_at, b.sealed_at, b.finished_at),
        (t0(), None, None)
    );
    assert_eq!((b.successor_job_id, b.on_dead), (None, OnDead::Summary));
    assert_eq!((&b.successor, &b.failure_successor), (&successor(), &None));
    assert_eq!((b.key_window_ms, &b.principal), (WINDOW_MS, &None));
    let kinds: Vec<_> = created
        .children
        .iter()
        .map(|e| e.job.kind.as_str())
        .collect();
    assert_eq!(
        kinds,
        ["child-0", "child-1", "child-2"],
        "in the order given"
    );
    for e in &created.children {
        assert!(!e.deduplicated, "{e:?}");
        assert_eq!(
            (e.job.batch_id, e.job.state),
            (Some(b.id), JobState::Available)
        );
        assert_eq!(get(db, e.job.id).await, e.job, "stored child");
    }
    assert_eq!(batch(db, b.id).await, *b, "stored batch");
    let added = add(db, b.id, kids("kids", 2), at(1_000))
        .await
        .expect("add");
    assert_eq!(counts(&added.batch), (BatchState::Open, 5, 0, 0, 0));
    let sealed = seal(db, b.id, at(2_000)).await.expect("seal");
    assert_eq!(counts(&sealed), (BatchState::Sealed, 5, 0, 0, 0));
    assert_eq!(
        (sealed.sealed_at, sealed.finished_at),
        (Some(at(2_000)), None)
    );
    assert_eq!(sealed.successor_job_id, None);
    assert_eq!(batch(db, b.id).await, sealed, "stored batch");
    let mut expected = child_ids(&created);
    expected.extend(child_ids(&added));
    let children = children_of(db, b.id).await;
    assert_eq!(ids(&children), expected, "every child, in id order");
    assert!(children.iter().all(|c| c.batch_id == Some(b.id)));
    assert_eq!(
        states(db, b.id).await,
        HashMap::from([(JobState::Available, 5)])
    );
    assert!(successors(db, b.id).await.is_empty(), "no successor yet");
}

/// `batch_list` lists newest first, filters by state and principal, and pages with
/// `before_id`; `batch_children` pages a batch's children (and no other batch's) in id
/// order with `after_id`; `batch_states` counts them by state; a missing batch is
/// `None`.
pub async fn batch_reads_list_page_and_count(db: &TestDb) {
    let alice = BatchInsert {
        principal: Some("alice".to_owned()),
        ..spec(OnDead::Summary, t0())
    };
    let open = create_with(db, alice, kids("a", 1), false).await.batch;
    let sealed = create(db, kids("kids", 5), true, t0()).await;
    let finished = create(db, vec![], true, t0()).await.batch;
    let newest = create(db, vec![], false, t0()).await.batch;
    let all = |limit| BatchList {
        limit,
        ..BatchList::default()
    };
    let every = list(db, all(100)).await;
    let expected = vec![newest.id, finished.id, sealed.batch.id, open.id];
    assert_eq!(batch_ids(&every), expected, "newest first");
    for b in &every {
        assert_eq!(&batch(db, b.id).await, b, "listed as stored");
    }
    for (state, want) in [
        (BatchState::Open, vec![newest.id, open.id]),
        (BatchState::Sealed, vec![sealed.batch.id]),
        (BatchState::Finished, vec![finished.id]),
    ] {
        let params = BatchList {
            state: Some(state),
            ..all(100)
        };
        assert_eq!(batch_ids(&list(db, params).await), want, "{state}");
    }
    let mine = BatchList {
        principal: Some("alice".to_owned()),
        ..all(100)
    };
    assert_eq!(batch_ids(&list(db, mine).await), vec![open.id]);
    let first = list(db, all(2)).await;
    assert_eq!(batch_ids(&first), expected[..2]);
    let next = BatchList {
        before_id: Some(first[1].id),
        ..all(2)
    };
    let second = list(db, next).await;
    assert_eq!(batch_ids(&second), expected[2..]);
    let past = BatchList {
        before_id: Some(open.id),
        ..all(2)
    };
    assert!(list(db, past).await.is_empty());
    assert_eq!(
        db.store
            .batch_get(newest.id + 1_000)
            .await
            .expect("batch_get"),
        None
    );

    let id = sealed.batch.id;
    let kids_ids = child_ids(&sealed);
    let mut paged = Vec::new();
    let mut after = None;
    for want in [2, 2, 1, 0] {
        let got = page(db, id, after, 2).await;
        assert_eq!(got.len(), want, "page after {after:?}");
        for child in &got {
            assert_eq!(&get(db, child.id).await, child, "a child as stored");
        }
        after = got.last().map(|c| c.id).or(after);
        paged.extend(ids(&got));
    }
    assert_eq!(paged, kids_ids, "pages in id order, each child once");
    assert_eq!(
        ids(&children_of(db, open.id).await).len(),
        1,
        "only its own"
    );
    assert!(children_of(db, finished.id).await.is_empty());

    let run = claim(db, "kids", 2, t0()).await;
    complete(db, run[0].lease_token(), at(1))
        .await
        .expect("complete");
    let expected = HashMap::from([
        (JobState::Available, 3),
        (JobState::Running, 1),
        (JobState::Completed, 1),
    ]);
    assert_eq!(states(db, id).await, expected);
    assert!(
        states(db, finished.id).await.is_empty(),
        "no child, no state"
    );
}

/// An empty batch created sealed finishes at once: its successor is enqueued in the same
/// transaction, as the spec says (kind, queue, args, priority), due now, with the key
/// `batch:{id}:done`; an empty batch sealed later finishes when it is sealed.
pub async fn batch_sealed_empty_finishes_at_once(db: &TestDb) {
    let created = create(db, vec![], true, at(1_000)).await;
    assert!(created.children.is_empty());
    let b = created.batch;
    assert_eq!(counts(&b), (BatchState::Finished, 0, 0, 0, 0));
    assert_eq!(
        (b.sealed_at, b.finished_at),
        (Some(at(1_000)), Some(at(1_000)))
    );
    assert_eq!(batch(db, b.id).await, b, "stored batch");
    let next = the_successor(db, &b, DONE).await;
    let spec = successor();
    assert_eq!(
        (&next.queue, &next.args, next.priority, next.max_attempts),
        (&spec.queue, &spec.args, spec.priority, spec.max_attempts)
    );
    assert_eq!((next.state, next.run_at), (JobState::Available, at(1_000)));
    let open = create(db, vec![], false, at(2_000)).await.batch;
    assert_eq!(counts(&open), (BatchState::Open, 0, 0, 0, 0));
    assert!(
        successors(db, open.id).await.is_empty(),
        "open: no successor"
    );
    let sealed = seal(db, open.id, at(3_000)).await.expect("seal");
    assert_eq!(counts(&sealed), (BatchState::Finished, 0, 0, 0, 0));
    assert_eq!(sealed.finished_at, Some(at(3_000)));
    the_successor(db, &sealed, DONE).await;
}

/// Children completing one by one move `completed`; the batch stays sealed, with no
/// successor, until the last one, whose completion enqueues exactly one.
pub async fn batch_children_completing_enqueue_the_successor_once(db: &TestDb) {
    let b = create(db, kids("kids", 3), true, t0()).await.batch;
    let run = claim(db, "kids", 3, t0()).await;
    assert_eq!(run.len(), 3);
    for (n, child) in (1..).zip(&run) {
        assert!(successors(db, b.id).await.is_empty(), "before child {n}");
        let done = complete(db, child.lease_token(), at(n * 1_000)).await;
        done.expect("complete");
        let state = if n < 3 {
            BatchState::Sealed
        } else {
            BatchState::Finished
        };
        assert_eq!(
            counts_of(db, b.id).await,
            (state, 3, n, 0, 0),
            "after child {n}"
        );
    }
    let finished = batch(db, b.id).await;
    assert_eq!(finished.finished_at, Some(at(3_000)));
    the_successor(db, &finished, DONE).await;
}

/// One `job_complete_many` completing children of two batches and a job of none moves
/// each batch's count by its own children: the batch whose last children it completed
/// finishes with one successor, the other waits for its last child.
pub async fn batch_complete_many_counts_the_children_of_each_batch(db: &TestDb) {
    let one = create(db, kids("q1", 2), true, t0()).await.batch;
    let two = create(db, kids("q2", 3), true, t0()).await.batch;
    insert_one(db, job_in("q3", "plain"), t0()).await;
    let a = claim(db, "q1", 2, t0()).await;
    let b = claim(db, "q2", 3, t0()).await;
    let plain = claim(db, "q3", 1, t0()).await.remove(0);
    let leases = vec![
        b[0].lease_token(),
        a[0].lease_token(),
        plain.lease_token(),
        b[1].lease_token(),
        a[1].lease_token(),
    ];
    let mut expected: Vec<i64> = leases.iter().map(|l| l.job_id).collect();
    expected.sort_unstable();
    assert_eq!(complete_many(db, leases, vec![], at(1_000)).await, expected);
    let first = batch(db, one.id).await;
    assert_eq!(counts(&first), (BatchState::Finished, 2, 2, 0, 0));
    the_successor(db, &first, DONE).await;
    assert_eq!(
        counts_of(db, two.id).await,
        (BatchState::Sealed, 3, 2, 0, 0)
    );
    assert!(successors(db, two.id).await.is_empty());
    complete(db, b[2].lease_token(), at(2_000))
        .await
        .expect("complete the last child");
    let second = batch(db, two.id).await;
    assert_eq!(counts(&second), (BatchState::Finished, 3, 3, 0, 0));
    the_successor(db, &second, DONE).await;
    assert_eq!(
        successors(db, one.id).await.len(),
        1,
        "still one for the first"
    );
}

/// A child dead by `job_fail` without a delay, or by `job_rescue` with its attempts used
/// up, counts as dead; a child cancelled waiting or running counts as cancelled; a
/// retryable failure counts nothing. The batch finishes with the last child to finish.
pub async fn batch_counts_dead_and_cancelled_children(db: &TestDb) {
    let children = vec![
        job_in("fail", "dies"),
        NewJob {
            max_attempts: 1,
            ..job_in("lapse", "lapses")
        },
        job_in("wait", "cancelled-waiting"),
        job_in("run", "cancelled-running"),
        job_in("flaky", "retries"),
    ];
    let created = create(db, children, true, t0()).await;
    let id = created.batch.id;
    let [_, _, waiting, _, _] = &created.children[..] else {
        panic!("five children: {:?}", created.children);
    };
    let dies = claim(db, "fail", 1, t0()).await.remove(0);
    let dead = fail(db, dies.lease_token(), None, at(1_000))
        .await
        .expect("fail");
    assert_eq!(dead.state, JobState::Dead);
    assert_eq!(counts_of(db, id).await, (BatchState::Sealed, 5, 0, 1, 0));
    let lapses = claim(db, "lapse", 1, t0()).await.remove(0);
    let late = LEASE_MS + 1;
    let rescued = rescue(db, at(late)).await;
    assert_eq!(ids(&rescued), vec![lapses.id]);
    assert_eq!(rescued[0].state, JobState::Dead, "its one attempt was used");
    assert_eq!(counts_of(db, id).await, (BatchState::Sealed, 5, 0, 2, 0));
    cancel(db, waiting.job.id, at(late + 1))
        .await
        .expect("cancel waiting");
    assert_eq!(counts_of(db, id).await, (BatchState::Sealed, 5, 0, 2, 1));
    let runs = claim(db, "run", 1, at(late + 2)).await.remove(0);
    cancel(db, runs.id, at(late + 3))
        .await
        .expect("cancel running");
    assert_eq!(counts_of(db, id).await, (BatchState::Sealed, 5, 0, 2, 2));
    let flaky = claim(db, "flaky", 1, at(late + 4)).await.remove(0);
    let retryable = fail(db, flaky.lease_token(), Some(1_000), at(late + 5)).await;
    assert_eq!(retryable.expect("fail").state, JobState::Retryable);
    assert_eq!(counts_of(db, id).await, (BatchState::Sealed, 5, 0, 2, 2));
    let expected = HashMap::from([
        (JobState::Dead, 2),
        (JobState::Cancelled, 2),
        (JobState::Retryable, 1),
    ]);
    assert_eq!(states(db, id).await, expected);
    assert!(successors(db, id).await.is_empty(), "one child to go");
    let again = claim(db, "flaky", 1, at(late + 1_005)).await.remove(0);
    complete(db, again.lease_token(), at(late + 1_006))
        .await
        .expect("complete");
    let finished = batch(db, id).await;
    assert_eq!(counts(&finished), (BatchState::Finished, 5, 1, 2, 2));
    the_successor(db, &finished, DONE).await;
}

/// The dead-children policy: with `failure_successor` and a dead child the failure
/// successor runs instead of the successor; with `failure_successor` and no dead child
/// (a cancelled one is not dead) the successor runs; with `summary` the successor runs
/// and reads `dead = 1` in the counts.
pub async fn batch_on_dead_chooses_the_successor(db: &TestDb) {
    let policy = OnDead::FailureSuccessor;
    let failing = create_with(db, spec(policy, t0()), kids("f", 2), true).await;
    let run = claim(db, "f", 2, t0()).await;
    fail(db, run[0].lease_token(), None, at(1))
        .await
        .expect("fail");
    complete(db, run[1].lease_token(), at(2))
        .await
        .expect("complete");
    let b = batch(db, failing.batch.id).await;
    assert_eq!(counts(&b), (BatchState::Finished, 2, 1, 1, 0));
    let next = the_successor(db, &b, FAILED).await;
    assert_eq!(
        (&next.queue, &next.args),
        (&failure_successor().queue, &failure_successor().args)
    );

    let clean = create_with(db, spec(policy, t0()), kids("c", 2), true).await;
    let run = claim(db, "c", 2, t0()).await;
    complete(db, run[0].lease_token(), at(1))
        .await
        .expect("complete");
    cancel(db, run[1].id, at(2)).await.expect("cancel");
    let b = batch(db, clean.batch.id).await;
    assert_eq!(counts(&b), (BatchState::Finished, 2, 1, 0, 1));
    the_successor(db, &b, DONE).await;

    let summary = create(db, kids("s", 2), true, t0()).await;
    let run = claim(db, "s", 2, t0()).await;
    fail(db, run[0].lease_token(), None, at(1))
        .await
        .expect("fail");
    complete(db, run[1].lease_token(), at(2))
        .await
        .expect("complete");
    let b = batch(db, summary.batch.id).await;
    assert_eq!(counts(&b), (BatchState::Finished, 2, 1, 1, 0));
    the_successor(db, &b, DONE).await;
}

/// A batch whose policy is `failure_successor` without a failure successor, or whose
/// key window is not positive, is refused (`Invalid`) and nothing is written: no batch,
/// no child.
pub async fn batch_create_refuses_an_invalid_spec(db: &TestDb) {
    let no_failure = BatchInsert {
        failure_successor: None,
        ..spec(OnDead::FailureSuccessor, t0())
    };
    let no_window = BatchInsert {
        key_window_ms: 0,
        ..spec(OnDead::Summary, t0())
    };
    for (what, batch) in [
        ("no failure successor", no_failure),
        ("no window", no_window),
    ] {
        let params = BatchCreate {
            batch,
            children: kids("k", 2),
            seal: true,
        };
        let result = db.store.batch_create(params).await;
        assert!(
            matches!(result, Err(StoreError::Invalid(_))),
            "{what}: {result:?}"
        );
    }
    let every = BatchList {
        limit: 100,
        ..BatchList::default()
    };
    assert!(list(db, every).await.is_empty(), "no batch");
    assert!(all_jobs(db).await.is_empty(), "no job");
}

/// An operator's retry of a dead or cancelled child before the batch finished takes it
/// out of `dead` or `cancelled`; the batch then finishes only when the retried children
/// finish.
pub async fn batch_retry_of_a_child_takes_it_out_of_the_count(db: &TestDb) {
    let id = create(db, kids("k", 3), true, t0()).await.batch.id;
    let run = claim(db, "k", 3, t0()).await;
    fail(db, run[0].lease_token(), None, at(1))
        .await
        .expect("fail");
    cancel(db, run[1].id, at(2)).await.expect("cancel");
    assert_eq!(counts_of(db, id).await, (BatchState::Sealed, 3, 0, 1, 1));
    let retried = retry(db, vec![run[0].id, run[1].id], at(3)).await;
    assert_eq!(ids(&retried), vec![run[0].id, run[1].id]);
    assert_eq!(counts_of(db, id).await, (BatchState::Sealed, 3, 0, 0, 0));
    complete(db, run[2].lease_token(), at(4))
        .await
        .expect("complete");
    assert_eq!(counts_of(db, id).await, (BatchState::Sealed, 3, 1, 0, 0));
    let again = claim(db, "k", 2, at(5)).await;
    assert_eq!(ids(&again), vec![run[0].id, run[1].id]);
    complete(db, again[0].lease_token(), at(6))
        .await
        .expect("complete");
    assert_eq!(counts_of(db, id).await, (BatchState::Sealed, 3, 2, 0, 0));
    assert!(successors(db, id).await.is_empty(), "a retried child to go");
    complete(db, again[1].lease_token(), at(7))
        .await
        .expect("complete");
    let finished = batch(db, id).await;
    assert_eq!(counts(&finished), (BatchState::Finished, 3, 3, 0, 0));
    assert_eq!(finished.finished_at, Some(at(7)));
    the_successor(db, &finished, DONE).await;
}

/// After the batch finished, an operator's retry of its dead child and that child's
/// completion move the counts but enqueue no second successor, and the batch keeps its
/// successor and finish time.
pub async fn batch_retry_after_the_successor_makes_no_second_one(db: &TestDb) {
    let id = create(db, kids("k", 2), true, t0()).await.batch.id;
    let run = claim(db, "k", 2, t0()).await;
    complete(db, run[0].lease_token(), at(1))
        .await
        .expect("complete");
    fail(db, run[1].lease_token(), None, at(2))
        .await
        .expect("fail");
    let finished = batch(db, id).await;
    assert_eq!(counts(&finished), (BatchState::Finished, 2, 1, 1, 0));
    let next = the_successor(db, &finished, DONE).await;
    assert_eq!(
        ids(&retry(db, vec![run[1].id], at(3)).await),
        vec![run[1].id]
    );
    assert_eq!(counts_of(db, id).await, (BatchState::Finished, 2, 1, 0, 0));
    let again = claim(db, "k", 1, at(4)).await.remove(0);
    complete(db, again.lease_token(), at(5))
        .await
        .expect("complete");
    let after = batch(db, id).await;
    assert_eq!(counts(&after), (BatchState::Finished, 2, 2, 0, 0));
    assert_eq!(
        (after.successor_job_id, after.finished_at),
        (Some(next.id), finished.finished_at)
    );
    assert_eq!(successors(db, id).await, vec![next], "no second successor");
}

/// A child reclaimed after its lease expired: the old claim's completion (alone or in a
/// `job_complete_many`) is `LeaseLost` or left out and counts nothing; the current
/// claim's completion counts once and finishes the batch.
pub async fn batch_stale_claim_of_a_child_counts_nothing(db: &TestDb) {
    let id = create(db, kids("k", 1), true, t0()).await.batch.id;
    let first = claim(db, "k", 1, t0()).await.remove(0);
    let late = LEASE_MS + 1;
    let rescued = rescue(db, at(late)).await;
    assert_eq!(ids(&rescued), vec![first.id]);
    assert_eq!(rescued[0].state, JobState::Retryable);
    assert_eq!(counts_of(db, id).await, (BatchState::Sealed, 1, 0, 0, 0));
    let current = claim(db, "k", 1, at(late)).await.remove(0);
    assert_eq!((current.id, current.fence), (first.id, 2));
    let stale = first.lease_token();
    assert_lease_lost(complete(db, stale, at(late + 1)).await, stale);
    assert!(
        complete_many(db, vec![stale], vec![], at(late + 1))
            .await
            .is_empty()
    );
    assert_eq!(counts_of(db, id).await, (BatchState::Sealed, 1, 0, 0, 0));
    assert!(successors(db, id).await.is_empty());
    complete(db, current.lease_token(), at(late + 2))
        .await
        .expect("the current claim completes");
    let finished = batch(db, id).await;
    assert_eq!(counts(&finished), (BatchState::Finished, 1, 1, 0, 0));
    the_successor(db, &finished, DONE).await;
    assert_lease_lost(complete(db, stale, at(late + 3)).await, stale);
    assert_eq!(batch(db, id).await, finished, "nothing counted twice");
}

/// Adding to a sealed or a finished batch is a `Conflict` that names its state, and
/// nothing is written: no child inserted, no enqueue key taken (an open batch takes the
/// same key afterwards). Adding to a missing batch is `NotFound`.
pub async fn batch_add_to_a_closed_batch_is_refused_and_writes_nothing(db: &TestDb) {
    let sealed = create(db, kids("s", 1), true, t0()).await.batch;
    let finished = create(db, vec![], true, t0()).await.batch;
    assert_eq!(finished.state, BatchState::Finished);
    let late = || vec![keyed("late", "late", "late:1"), job_in("late", "plain")];
    let before = all_jobs(db).await;
    for b in [&sealed, &finished] {
        match add(db, b.id, late(), at(1_000)).await {
            Err(StoreError::Conflict(msg)) => {
                assert!(msg.contains(b.state.as_str()), "names the state: {msg}");
            }
            other => panic!(
                "add to a {} batch: expected Conflict, got {other:?}",
                b.state
            ),
        }
        assert_eq!(batch(db, b.id).await, *b, "the {} batch unchanged", b.state);
        assert_eq!(
            all_jobs(db).await,
            before,
            "no child of the {} batch",
            b.state
        );
    }
    let missing = finished.id + 1_000;
    let result = add(db, missing, late(), at(1_000)).await;
    assert!(
        matches!(result, Err(StoreError::NotFound { .. })),
        "{result:?}"
    );
    assert_eq!(all_jobs(db).await, before, "no child of a missing batch");
    let open = create(db, vec![], false, at(2_000)).await.batch;
    let added = add(db, open.id, late(), at(2_000)).await.expect("add");
    assert!(
        added.children.iter().all(|e| !e.deduplicated),
        "the refused adds took no key: {added:?}"
    );
    assert_eq!(counts(&added.batch), (BatchState::Open, 2, 0, 0, 0));
}

/// Sealing a sealed or finished batch is harmless: it returns the batch unchanged (and
/// makes no second successor). Sealing a missing batch is `NotFound`.
pub async fn batch_seal_twice_changes_nothing(db: &TestDb) {
    let id = create(db, kids("k", 1), false, t0()).await.batch.id;
    let sealed = seal(db, id, at(1_000)).await.expect("seal");
    assert_eq!(counts(&sealed), (BatchState::Sealed, 1, 0, 0, 0));
    assert_eq!(seal(db, id, at(2_000)).await.expect("seal again"), sealed);
    assert_eq!(batch(db, id).await, sealed);
    let finished = create(db, vec![], true, t0()).await.batch;
    assert_eq!(
        seal(db, finished.id, at(2_000)).await.expect("seal"),
        finished
    );
    the_successor(db, &finished, DONE).await;
    let result = seal(db, finished.id + 1_000, at(2_000)).await;
    assert!(
        matches!(result, Err(StoreError::NotFound { .. })),
        "{result:?}"
    );
}

/// Children with enqueue keys added twice count once: the second add returns the
/// children holding the keys, deduplicated, and counts only its new child; the batch
/// then finishes when the children it counted finish.
pub async fn batch_add_of_held_keys_counts_each_child_once(db: &TestDb) {
    let id = create(db, vec![], false, t0()).await.batch.id;
    let a = || keyed("k", "a", "child:a");
    let b = || keyed("k", "b", "child:b");
    let first = add(db, id, vec![a(), b()], at(1)).await.expect("add");
    assert!(first.children.iter().all(|e| !e.deduplicated));
    assert_eq!(first.batch.total, 2);
    let again = add(db, id, vec![a(), b(), keyed("k", "c", "child:c")], at(2)).await;
    let again = again.expect("add again");
    let dedup: Vec<_> = again.children.iter().map(|e| e.deduplicated).collect();
    assert_eq!(dedup, [true, true, false]);
    assert_eq!(child_ids(&again)[..2], child_ids(&first)[..]);
    assert_eq!(again.batch.total, 3, "each child counted once");
    let children = children_of(db, id).await;
    assert_eq!(ids(&children), child_ids(&again));
    seal(db, id, at(3)).await.expect("seal");
    let run = claim(db, "k", 3, at(4)).await;
    let leases = run.iter().map(JobRow::lease_token).collect();
    assert_eq!(complete_many(db, leases, vec![], at(5)).await.len(), 3);
    let finished = batch(db, id).await;
    assert_eq!(counts(&finished), (BatchState::Finished, 3, 3, 0, 0));
    the_successor(db, &finished, DONE).await;
}

/// A child's `result` is stored with its completion, by `job_complete` and by
/// `job_complete_many` (each its own), and `batch_children` returns them; a child that
/// completed without one has none.
pub async fn batch_children_keep_the_results_they_complete_with(db: &TestDb) {
    let id = create(db, kids("k", 4), true, t0()).await.batch.id;
    let run = claim(db, "k", 4, t0()).await;
    let object = json!({"total": 12.5, "items": ["a", "b"], "note": "ünïcode"});
    let done = finish(db, run[0].lease_token(), Some(object.clone()), at(1)).await;
    assert_eq!(done.result, Some(object.clone()));
    assert_eq!(get(db, run[0].id).await, done, "stored row");
    let leases = vec![run[1].lease_token(), run[2].lease_token()];
    let results = vec![(run[2].id, json!("ok")), (run[1].id, json!([1, 2, 3]))];
    let completed = complete_many(db, leases, results, at(2)).await;
    assert_eq!(completed, vec![run[1].id, run[2].id]);
    let plain = finish(db, run[3].lease_token(), None, at(3)).await;
    assert_eq!(plain.result, None);
    let got: Vec<_> = children_of(db, id)
        .await
        .into_iter()
        .map(|c| c.result)
        .collect();
    let expected = [
        Some(object),
        Some(json!([1, 2, 3])),
        Some(json!("ok")),
        None,
    ];
    assert_eq!(got, expected);
    assert_eq!(get(db, run[1].id).await.result, Some(json!([1, 2, 3])));
    the_successor(db, &batch(db, id).await, DONE).await;
}

/// A batch created in a caller's transaction commits or rolls back with it, children and
/// successor alike: after a rollback there is no batch and no job; after a commit the
/// batch and its children are there.
pub async fn batch_create_rolls_back_with_its_transaction(db: &TestDb) {
    let params = |children, seal| BatchCreate {
        batch: spec(OnDead::Summary, t0()),
        children,
        seal,
    };
    let mut tx = db.store.begin().await.expect("begin");
    let open = tx.batch_create(params(kids("k", 2), false)).await;
    let open = open.expect("batch_create in tx").batch;
    let done = tx.batch_create(params(vec![], true)).await;
    let done = done.expect("batch_create in tx").batch;
    assert_eq!(
        done.state,
        BatchState::Finished,
        "finished in the transaction"
    );
    let seen = tx.batch_get(open.id).await.expect("batch_get in tx");
    assert_eq!(seen, Some(open.clone()), "visible inside the transaction");
    tx.rollback().await.expect("rollback");
    for id in [open.id, done.id] {
        assert_eq!(db.store.batch_get(id).await.expect("batch_get"), None);
    }
    assert!(all_jobs(db).await.is_empty(), "no child, no successor");
    let mut tx = db.store.begin().await.expect("begin");
    let kept = tx.batch_create(params(kids("k", 2), false)).await;
    let kept = kept.expect("batch_create in tx");
    tx.commit().await.expect("commit");
    assert_eq!(batch(db, kept.batch.id).await, kept.batch);
    assert_eq!(ids(&children_of(db, kept.batch.id).await), child_ids(&kept));
}

/// Starts the completion of `lease` at `now` on another connection; returns once it runs.
pub(super) async fn spawn_complete(
    db: &TestDb,
    lease: LeaseToken,
    now: Timestamp,
) -> tokio::task::JoinHandle<StoreResult<JobRow>> {
    let store = db.store.clone();
    let params = JobComplete {
        lease,
        result: None,
        now: Some(now),
    };
    spawn_started(async move { store.job_complete(params).await }).await
}

/// The outcome of a racer, which must end within 30 s.
pub(super) async fn outcome<T>(racer: tokio::task::JoinHandle<StoreResult<T>>) -> StoreResult<T> {
    within(30, "the racer", racer).await.expect("racer task")
}

/// The last two children of a sealed batch completing in two transactions at once: the
/// second waits for the first's hold on the batch, counts on what it committed, and
/// enqueues the one successor: counts 2 of 2, exactly one successor.
pub async fn batch_last_children_completing_at_once_enqueue_one_successor(db: &TestDb) {
    let id = create(db, kids("k", 2), true, t0()).await.batch.id;
    let run = claim(db, "k", 2, t0()).await;
    let mut tx = db.store.begin().await.expect("begin");
    let first = JobComplete {
        lease: run[0].lease_token(),
        result: None,
        now: Some(at(1_000)),
    };
    tx.job_complete(first).await.expect("complete in tx");
    let racer = spawn_complete(db, run[1].lease_token(), at(2_000)).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit the first completion");
    outcome(racer).await.expect("the racing completion");
    let finished = batch(db, id).await;
    assert_eq!(counts(&finished), (BatchState::Finished, 2, 2, 0, 0));
    assert_eq!(finished.finished_at, Some(at(2_000)));
    the_successor(db, &finished, DONE).await;
}

/// A seal racing the completion of the batch's last child, not yet committed, waits for
/// it and then sees every child finished: the seal itself finishes the batch, once.
pub async fn batch_seal_waits_for_the_last_completion_and_finishes(db: &TestDb) {
    let id = create(db, kids("k", 1), false, t0()).await.batch.id;
    let child = claim(db, "k", 1, t0()).await.remove(0);
    let mut tx = db.store.begin().await.expect("begin");
    let params = JobComplete {
        lease: child.lease_token(),
        result: None,
        now: Some(at(1_000)),
    };
    tx.job_complete(params).await.expect("complete in tx");
    let store = db.store.clone();
    let params = BatchSeal {
        batch_id: id,
        now: Some(at(2_000)),
    };
    let racer = spawn_started(async move { store.batch_seal(params).await }).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit the completion");
    let sealed = outcome(racer).await.expect("the racing seal");
    assert_eq!(counts(&sealed), (BatchState::Finished, 1, 1, 0, 0));
    assert_eq!(batch(db, id).await, sealed, "stored batch");
    the_successor(db, &sealed, DONE).await;
}

/// The completion of an open batch's last child racing the batch's seal, not yet
/// committed, waits for it and then sees the batch sealed: the completion finishes the
/// batch, once.
pub async fn batch_last_completion_waits_for_the_seal_and_finishes(db: &TestDb) {
    let id = create(db, kids("k", 1), false, t0()).await.batch.id;
    let child = claim(db, "k", 1, t0()).await.remove(0);
    let mut tx = db.store.begin().await.expect("begin");
    let params = BatchSeal {
        batch_id: id,
        now: Some(at(1_000)),
    };
    let sealed = tx.batch_seal(params).await.expect("seal in tx");
    assert_eq!(counts(&sealed), (BatchState::Sealed, 1, 0, 0, 0));
    let racer = spawn_complete(db, child.lease_token(), at(2_000)).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit the seal");
    outcome(racer).await.expect("the racing completion");
    let finished = batch(db, id).await;
    assert_eq!(counts(&finished), (BatchState::Finished, 1, 1, 0, 0));
    assert_eq!(finished.finished_at, Some(at(2_000)));
    the_successor(db, &finished, DONE).await;
}

/// An add racing the batch's seal, not yet committed, waits for it and is then refused
/// (`Conflict`): its children, already inserted in its transaction, are rolled back.
pub async fn batch_add_waiting_for_a_seal_is_refused(db: &TestDb) {
    let id = create(db, kids("k", 1), false, t0()).await.batch.id;
    let before = all_jobs(db).await;
    let mut tx = db.store.begin().await.expect("begin");
    let params = BatchSeal {
        batch_id: id,
        now: Some(at(1_000)),
    };
    let sealed = tx.batch_seal(params).await.expect("seal in tx");
    let store = db.store.clone();
    let params = add_params(id, kids("late", 2), at(2_000));
    let racer = spawn_started(async move { store.batch_add(params).await }).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit the seal");
    match outcome(racer).await {
        Err(StoreError::Conflict(msg)) => assert!(msg.contains("sealed"), "{msg}"),
        other => panic!("expected Conflict, got {other:?}"),
    }
    assert_eq!(batch(db, id).await, sealed, "the sealed batch unchanged");
    assert_eq!(all_jobs(db).await, before, "no late child");
}

/// A purge of batches deletes those finished before the cutoff, with their shard counts,
/// and keeps open and sealed batches and those finished after it; its count says so
/// beforehand.
pub async fn batch_purge_deletes_finished_batches_only(db: &TestDb) {
    let old = create(db, kids("old", 2), true, t0()).await.batch;
    for child in claim(db, "old", 2, t0()).await {
        finish(db, child.lease_token(), None, at(1_000)).await;
    }
    let open = create(db, kids("open", 1), false, t0()).await.batch;
    let sealed = create(db, kids("sealed", 1), true, t0()).await.batch;
    let late = create(db, Vec::new(), true, at(5_000)).await.batch;
    assert_eq!(batch(db, late.id).await.state, BatchState::Finished);
    let before = at(2_000);
    let count = db.store.purge_count(PurgeTarget::Batches, before).await;
    assert_eq!(count.expect("purge_count"), 1);
    let params = Purge {
        target: PurgeTarget::Batches,
        before,
        limit: 10,
    };
    assert_eq!(db.store.purge(params).await.expect("purge"), 1);
    assert_eq!(db.store.batch_get(old.id).await.expect("batch_get"), None);
    let sql = "SELECT count(*) FROM idem_batch_shard WHERE batch_id = $1";
    let shards = db.store.query(sql, &[old.id.into()]).await.expect("query");
    assert_eq!(
        shards[0][0].as_i64(),
        Some(0),
        "its shard counts went with it"
    );
    for kept in [open.id, sealed.id, late.id] {
        batch(db, kept).await;
    }
    assert_eq!(db.store.purge(params).await.expect("purge again"), 0);
}
