//! `job_insert` with enqueue keys: while a `(queue, key)` is held inside the window, an
//! insert with it returns the holding job marked deduplicated and inserts nothing; a key
//! taken more than `key_window_ms` before `now` is free again and goes to the new job.
//! The unique key decides, so it holds inside one batch, inside a caller's transaction
//! (and not after a rollback), and between producers racing on separate transactions.

use std::sync::Arc;

use idem_store::{Enqueued, JobInsert, JobState, NewJob, Timestamp};
use tokio::sync::Barrier;

use crate::TestDb;
use crate::fixture::{
    QUEUE, all_jobs, assert_waits_for, at, claim, complete, get, ids, job_in, spawn_started, t0,
};
use crate::harness::within;

/// The window every case enqueues with: one hour.
pub(crate) const WINDOW_MS: i64 = 3_600_000;

/// A job of `kind` in `queue` with enqueue key `key`.
pub(crate) fn keyed(queue: &str, kind: &str, key: &str) -> NewJob {
    NewJob {
        enqueue_key: Some(key.to_owned()),
        ..job_in(queue, kind)
    }
}

/// The params of an insert of `jobs` at `now` with [`WINDOW_MS`].
pub(crate) fn enqueue_params(jobs: Vec<NewJob>, now: Timestamp) -> JobInsert {
    JobInsert {
        jobs,
        key_window_ms: WINDOW_MS,
        now: Some(now),
    }
}

/// Inserts `jobs` at `now` with [`WINDOW_MS`]; the results in input order.
pub(crate) async fn enqueue(db: &TestDb, jobs: Vec<NewJob>, now: Timestamp) -> Vec<Enqueued> {
    let params = enqueue_params(jobs, now);
    db.store.job_insert(params).await.expect("job_insert")
}

/// Inserts one job at `now` with [`WINDOW_MS`].
pub(crate) async fn enqueue_one(db: &TestDb, job: NewJob, now: Timestamp) -> Enqueued {
    let mut out = enqueue(db, vec![job], now).await;
    assert_eq!(out.len(), 1, "job_insert of one job returned {out:?}");
    out.remove(0)
}

/// `(kind, deduplicated)` of each result, to compare a batch's outcome at a glance.
fn outcomes(results: &[Enqueued]) -> Vec<(&str, bool)> {
    results
        .iter()
        .map(|e| (e.job.kind.as_str(), e.deduplicated))
        .collect()
}

/// A second insert of a held `(queue, key)` returns the holding job as stored, marked
/// deduplicated, and inserts nothing, whatever the holder's state; the same key in
/// another queue is another job.
pub async fn enqueue_key_dedups_inside_the_window(db: &TestDb) {
    let first = enqueue_one(db, keyed(QUEUE, "receipt", "order:42"), t0()).await;
    assert!(!first.deduplicated, "the first insert is new: {first:?}");
    assert_eq!(first.job.state, JobState::Available);
    let again = enqueue_one(db, keyed(QUEUE, "other-kind", "order:42"), at(1_000)).await;
    assert!(again.deduplicated, "{again:?}");
    assert_eq!(again.job, first.job, "the holder, unchanged");
    assert_eq!(
        ids(&all_jobs(db).await),
        vec![first.job.id],
        "nothing inserted"
    );
    let running = claim(db, QUEUE, 1, at(2_000)).await.remove(0);
    let done = complete(db, running.lease_token(), at(3_000))
        .await
        .expect("complete");
    let after = enqueue_one(db, keyed(QUEUE, "receipt", "order:42"), at(4_000)).await;
    assert!(
        after.deduplicated,
        "a finished holder still holds: {after:?}"
    );
    assert_eq!(after.job, done, "the holder as stored now");
    let elsewhere = enqueue_one(db, keyed("mail", "receipt", "order:42"), at(5_000)).await;
    assert!(!elsewhere.deduplicated, "another queue: {elsewhere:?}");
    assert_ne!(elsewhere.job.id, first.job.id);
    assert_eq!(elsewhere.job.queue, "mail");
    assert_eq!(all_jobs(db).await.len(), 2);
}

/// A job's row carries the enqueue key it was enqueued with for its whole life: a
/// deduplicated insert returns the holder with its key, and after the window the key
/// passes to a new job while the first job still names it.
pub async fn enqueue_key_stays_on_its_job(db: &TestDb) {
    let first = enqueue_one(db, keyed(QUEUE, "receipt", "order:7"), t0()).await;
    assert_eq!(first.job.enqueue_key.as_deref(), Some("order:7"));
    let plain = enqueue_one(db, job_in(QUEUE, "receipt"), t0()).await;
    assert_eq!(plain.job.enqueue_key, None);
    let again = enqueue_one(db, keyed(QUEUE, "receipt", "order:7"), at(1_000)).await;
    assert!(again.deduplicated);
    assert_eq!(again.job.enqueue_key.as_deref(), Some("order:7"));
    let running = claim(db, QUEUE, 2, at(2_000)).await;
    for job in &running {
        complete(db, job.lease_token(), at(3_000))
            .await
            .expect("complete");
    }
    let later = enqueue_one(
        db,
        keyed(QUEUE, "receipt", "order:7"),
        at(WINDOW_MS + 3_001),
    )
    .await;
    assert!(!later.deduplicated, "the window passed: {later:?}");
    assert_eq!(later.job.enqueue_key.as_deref(), Some("order:7"));
    let kept = get(db, first.job.id).await;
    assert_eq!(
        kept.enqueue_key.as_deref(),
        Some("order:7"),
        "the first job still names it"
    );
}

/// The window runs from when the key was taken: a key taken exactly `key_window_ms`
/// before `now` is still held (one millisecond less too), and a deduplicated insert does
/// not extend it; one millisecond later it is free (its job has finished: see
/// `enqueue_key_holds_while_its_job_may_run`), the insert is new and the key now belongs
/// to the new job, with a window of its own.
pub async fn enqueue_key_is_free_again_after_the_window(db: &TestDb) {
    let first = enqueue_one(db, keyed(QUEUE, "a", "nightly"), t0()).await;
    finish(db, &first).await;
    for (kind, now) in [("b", at(WINDOW_MS - 1)), ("c", at(WINDOW_MS))] {
        let inside = enqueue_one(db, keyed(QUEUE, kind, "nightly"), now).await;
        assert!(inside.deduplicated, "at {now}: {inside:?}");
        assert_eq!(inside.job.id, first.job.id, "at {now}");
    }
    let outside = enqueue_one(db, keyed(QUEUE, "d", "nightly"), at(WINDOW_MS + 1)).await;
    assert!(!outside.deduplicated, "just outside: {outside:?}");
    assert_ne!(outside.job.id, first.job.id);
    assert_eq!(
        (outside.job.kind.as_str(), outside.job.created_at),
        ("d", at(WINDOW_MS + 1))
    );
    for (kind, now) in [("e", at(WINDOW_MS + 2)), ("f", at(2 * WINDOW_MS + 1))] {
        let third = enqueue_one(db, keyed(QUEUE, kind, "nightly"), now).await;
        assert!(third.deduplicated, "at {now}: {third:?}");
        assert_eq!(third.job.id, outside.job.id, "the key moved to the new job");
    }
    let mut stored = ids(&all_jobs(db).await);
    stored.sort_unstable();
    assert_eq!(stored, vec![first.job.id, outside.job.id]);
}

/// A key's window runs from the later of its creation and its job's `run_at`: the key of
/// a job scheduled beyond the window still deduplicates a re-sent request after the
/// window has passed since its creation, until the window has passed since the job's
/// `run_at`; and a purge with a cutoff between the two leaves it. (The job is cancelled
/// at once, so only the window holds the key.)
pub async fn enqueue_key_window_runs_from_the_jobs_run_at(db: &TestDb) {
    let run_at = at(4 * WINDOW_MS);
    let scheduled = NewJob {
        run_at: Some(run_at),
        ..keyed(QUEUE, "report", "month:2030-06")
    };
    let first = enqueue_one(db, scheduled, t0()).await;
    assert_eq!(first.job.state, JobState::Scheduled);
    finish(db, &first).await;
    let resent = enqueue_one(
        db,
        keyed(QUEUE, "report", "month:2030-06"),
        at(2 * WINDOW_MS),
    )
    .await;
    assert!(resent.deduplicated, "before the job ran: {resent:?}");
    assert_eq!(resent.job.id, first.job.id);
    let purge = idem_store::Purge {
        target: idem_store::PurgeTarget::EnqueueKeys,
        before: at(3 * WINDOW_MS),
        limit: 10,
    };
    assert_eq!(db.store.purge(purge).await.expect("purge"), 0);
    let edge = run_at + chrono::Duration::milliseconds(WINDOW_MS);
    let inside = enqueue_one(db, keyed(QUEUE, "report", "month:2030-06"), edge).await;
    assert!(inside.deduplicated, "a window after run_at: {inside:?}");
    let after = edge + chrono::Duration::milliseconds(1);
    let outside = enqueue_one(db, keyed(QUEUE, "report", "month:2030-06"), after).await;
    assert!(
        !outside.deduplicated,
        "past the window after run_at: {outside:?}"
    );
}

/// Finishes `held`'s job (cancels it while it waits), so that its key lapses with its
/// window alone.
pub(crate) async fn finish(db: &TestDb, held: &Enqueued) {
    let cancelled = crate::fixture::cancel(db, held.job.id, held.job.created_at).await;
    assert_eq!(cancelled.expect("cancel").state, JobState::Cancelled);
}

/// A key never lapses while its job may still run (scheduled, available, running,
/// retryable), however long past its window: a job waiting in a backlog, or for a worker
/// that knows its kind, deduplicates a re-sent request and keeps its key through purges;
/// once it has finished, the key lapses with its window.
pub async fn enqueue_key_holds_while_its_job_may_run(db: &TestDb) {
    let first = enqueue_one(db, keyed(QUEUE, "waits", "order:9"), t0()).await;
    let late = at(5 * WINDOW_MS);
    let resent = enqueue_one(db, keyed(QUEUE, "waits", "order:9"), late).await;
    assert!(resent.deduplicated, "its job still waits: {resent:?}");
    assert_eq!(resent.job.id, first.job.id);
    let purge = idem_store::Purge {
        target: idem_store::PurgeTarget::EnqueueKeys,
        before: late,
        limit: 10,
    };
    let count = db.store.purge_count(purge.target, purge.before).await;
    assert_eq!(count.expect("purge_count"), 0);
    assert_eq!(db.store.purge(purge).await.expect("purge"), 0);
    let running = claim(db, QUEUE, 1, late).await.remove(0);
    let again = enqueue_one(db, keyed(QUEUE, "waits", "order:9"), late).await;
    assert!(again.deduplicated, "its job runs: {again:?}");
    complete(db, running.lease_token(), late)
        .await
        .expect("complete");
    let after = at(5 * WINDOW_MS + 1);
    let fresh = enqueue_one(db, keyed(QUEUE, "waits", "order:9"), after).await;
    assert!(
        !fresh.deduplicated,
        "finished and past its window: {fresh:?}"
    );
}

/// The same `(queue, key)` twice in one batch is one job: the later position returns the
/// earlier one's job, marked deduplicated.
pub async fn enqueue_key_twice_in_one_batch_is_one_job(db: &TestDb) {
    let batch = vec![keyed(QUEUE, "a", "k"), keyed(QUEUE, "b", "k")];
    let got = enqueue(db, batch, t0()).await;
    assert_eq!(outcomes(&got), vec![("a", false), ("a", true)]);
    assert_eq!(got[1].job, got[0].job);
    assert_eq!(ids(&all_jobs(db).await), vec![got[0].job.id]);
    assert_eq!(get(db, got[0].job.id).await, got[0].job, "stored row");
}

/// A batch mixing new keys, no keys, a key held before the batch, a key repeated in the
/// batch and the same key in another queue returns one result per job in input order;
/// only the new ones are inserted.
pub async fn enqueue_key_batch_keeps_the_input_order(db: &TestDb) {
    let held = enqueue_one(db, keyed(QUEUE, "holder", "held"), t0()).await;
    let batch = vec![
        keyed(QUEUE, "new-1", "fresh-1"),
        job_in(QUEUE, "plain-1"),
        keyed(QUEUE, "again", "held"),
        keyed(QUEUE, "repeat", "fresh-1"),
        job_in(QUEUE, "plain-2"),
        keyed("other", "new-2", "held"),
        keyed(QUEUE, "again-2", "held"),
        keyed(QUEUE, "new-3", "fresh-3"),
    ];
    let got = enqueue(db, batch, at(1_000)).await;
    let expected = vec![
        ("new-1", false),
        ("plain-1", false),
        ("holder", true),
        ("new-1", true),
        ("plain-2", false),
        ("new-2", false),
        ("holder", true),
        ("new-3", false),
    ];
    assert_eq!(outcomes(&got), expected);
    assert_eq!(got[2].job, held.job);
    assert_eq!(got[6].job, held.job);
    assert_eq!(got[3].job, got[0].job);
    assert_eq!(got[5].job.queue, "other");
    let mut expected_ids: Vec<i64> = got
        .iter()
        .filter(|e| !e.deduplicated)
        .map(|e| e.job.id)
        .chain([held.job.id])
        .collect();
    expected_ids.sort_unstable();
    let mut stored = ids(&all_jobs(db).await);
    stored.sort_unstable();
    assert_eq!(stored, expected_ids, "only the new jobs were inserted");
    for e in got.iter().filter(|e| !e.deduplicated) {
        assert_eq!(
            get(db, e.job.id).await,
            e.job,
            "stored row of {}",
            e.job.kind
        );
    }
}

/// Inside a caller's transaction a key deduplicates against the transaction's own insert
/// and commits with it; a rolled-back transaction leaves neither job nor key.
pub async fn enqueue_key_follows_the_callers_transaction(db: &TestDb) {
    let mut tx = db.store.begin().await.expect("begin");
    let params = enqueue_params(vec![keyed(QUEUE, "a", "rolled-back")], t0());
    let lost = tx.job_insert(params).await.expect("insert in tx").remove(0);
    assert!(!lost.deduplicated);
    tx.rollback().await.expect("rollback");
    let free = enqueue_one(db, keyed(QUEUE, "b", "rolled-back"), at(1)).await;
    assert!(!free.deduplicated, "the key was rolled back: {free:?}");
    assert_eq!(ids(&all_jobs(db).await), vec![free.job.id]);

    let mut tx = db.store.begin().await.expect("begin");
    let params = enqueue_params(vec![keyed(QUEUE, "c", "committed")], at(2));
    let first = tx.job_insert(params).await.expect("insert in tx").remove(0);
    let params = enqueue_params(vec![keyed(QUEUE, "d", "committed")], at(3));
    let second = tx.job_insert(params).await.expect("again in tx").remove(0);
    assert!(second.deduplicated, "the transaction's own key: {second:?}");
    assert_eq!(second.job.id, first.job.id);
    tx.commit().await.expect("commit");
    let after = enqueue_one(db, keyed(QUEUE, "e", "committed"), at(4)).await;
    assert!(
        after.deduplicated,
        "committed with the transaction: {after:?}"
    );
    assert_eq!(after.job, first.job);
    assert_eq!(all_jobs(db).await.len(), 2);
}

/// A producer whose insert races another's open transaction on the same key waits for
/// it (PostgreSQL: blocked on the key's index entry; SQLite: queued for the writer) and,
/// once that commits, gets the committed job, deduplicated: one job.
pub async fn enqueue_key_racing_producer_gets_the_committed_job(db: &TestDb) {
    let mut tx = db.store.begin().await.expect("begin");
    let params = enqueue_params(vec![keyed(QUEUE, "a", "race")], t0());
    let first = tx.job_insert(params).await.expect("insert in tx").remove(0);
    assert!(!first.deduplicated);
    let store = db.store.clone();
    let params = enqueue_params(vec![keyed(QUEUE, "b", "race")], at(1));
    let racer = spawn_started(async move { store.job_insert(params).await }).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit");
    let second = within(30, "the racing insert", racer)
        .await
        .expect("racer task")
        .expect("racing job_insert")
        .remove(0);
    assert!(second.deduplicated, "{second:?}");
    assert_eq!(second.job.id, first.job.id);
    assert_eq!(ids(&all_jobs(db).await), vec![first.job.id]);
}

/// A producer waiting on another's transaction takes the key itself when that
/// transaction rolls back: its job is new, and the only one.
pub async fn enqueue_key_racing_producer_takes_a_rolled_back_key(db: &TestDb) {
    let mut tx = db.store.begin().await.expect("begin");
    let params = enqueue_params(vec![keyed(QUEUE, "a", "race")], t0());
    tx.job_insert(params).await.expect("insert in tx");
    let store = db.store.clone();
    let params = enqueue_params(vec![keyed(QUEUE, "b", "race")], at(1));
    let racer = spawn_started(async move { store.job_insert(params).await }).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.rollback().await.expect("rollback");
    let second = within(30, "the racing insert", racer)
        .await
        .expect("racer task")
        .expect("racing job_insert")
        .remove(0);
    assert!(!second.deduplicated, "{second:?}");
    assert_eq!(second.job.kind, "b");
    assert_eq!(ids(&all_jobs(db).await), vec![second.job.id]);
}

/// A job inserted claimed (local dispatch) whose enqueue waited for another producer's
/// hold on its key gets a lease that runs from after the wait, not from the start of its
/// transaction: on the database clock, its lease ends at least `lease_ms` after a moment
/// the test observed while the enqueue was still waiting.
pub async fn enqueue_claimed_lease_runs_from_after_the_wait(db: &TestDb) {
    let mut tx = db.store.begin().await.expect("begin");
    let params = JobInsert {
        now: None,
        ..enqueue_params(vec![keyed(QUEUE, "a", "lease")], t0())
    };
    tx.job_insert(params).await.expect("insert in tx");
    let lease_ms = 30_000;
    let claimed = NewJob {
        claim: Some(idem_store::InsertClaim {
            worker: "local".into(),
            lease_ms,
        }),
        ..keyed(QUEUE, "b", "lease")
    };
    let params = JobInsert {
        now: None,
        ..enqueue_params(vec![claimed], t0())
    };
    let store = db.store.clone();
    let racer = spawn_started(async move { store.job_insert(params).await }).await;
    assert_waits_for(db, &mut tx, &racer).await;
    let observed = db
        .store
        .now()
        .await
        .expect("the database clock while it waits");
    tx.rollback().await.expect("rollback");
    let second = within(30, "the waiting enqueue", racer)
        .await
        .expect("racer task")
        .expect("job_insert")
        .remove(0);
    assert_eq!(second.job.state, JobState::Running, "{second:?}");
    let stored = get(db, second.job.id).await;
    let expires = stored.lease_expires_at.expect("a lease");
    assert!(
        expires >= observed + chrono::Duration::milliseconds(lease_ms),
        "lease ends {expires}, less than {lease_ms} ms after {observed}, seen while waiting"
    );
    assert_eq!(
        second.job.lease_expires_at,
        Some(expires),
        "the row returned says so"
    );
}

/// Two producers inserting the same key at the same time, each in its own transaction:
/// one job; both got its id, and exactly one of them inserted it.
pub async fn enqueue_key_two_producers_at_once_get_one_job(db: &TestDb) {
    let (a, b) = tokio::join!(
        db.store
            .job_insert(enqueue_params(vec![keyed(QUEUE, "a", "both")], t0())),
        db.store
            .job_insert(enqueue_params(vec![keyed(QUEUE, "b", "both")], t0())),
    );
    let got = vec![
        a.expect("producer a").remove(0),
        b.expect("producer b").remove(0),
    ];
    assert_one_job(db, &got).await;
}

/// Eight producers, each in its own task and transaction, insert the same key at once:
/// one job; all got its id, and exactly one of them inserted it.
pub async fn enqueue_key_many_producers_get_one_job(db: &TestDb) {
    const PRODUCERS: usize = 8;
    let start = Arc::new(Barrier::new(PRODUCERS));
    let tasks: Vec<_> = (0..PRODUCERS)
        .map(|n| {
            let (store, start) = (db.store.clone(), start.clone());
            let params = enqueue_params(vec![keyed(QUEUE, &format!("p{n}"), "many")], t0());
            tokio::spawn(async move {
                start.wait().await;
                store.job_insert(params).await
            })
        })
        .collect();
    let mut got = Vec::new();
    for task in tasks {
        let mut out = within(60, "a concurrent producer", task)
            .await
            .expect("producer panicked")
            .expect("concurrent job_insert");
        got.push(out.remove(0));
    }
    assert_one_job(db, &got).await;
}

/// Asserts that `got`, the results of racing inserts of one key, name one job, that
/// exactly one of them inserted it, and that it is the only job stored.
async fn assert_one_job(db: &TestDb, got: &[Enqueued]) {
    let winners: Vec<&Enqueued> = got.iter().filter(|e| !e.deduplicated).collect();
    assert_eq!(winners.len(), 1, "exactly one insert is new: {got:?}");
    let winner = &winners[0].job;
    assert!(
        got.iter().all(|e| e.job.id == winner.id),
        "every producer got job {}: {got:?}",
        winner.id
    );
    assert_eq!(ids(&all_jobs(db).await), vec![winner.id], "one job stored");
    assert_eq!(
        get(db, winner.id).await.kind,
        winner.kind,
        "the winner's job"
    );
}

/// Two producers take over the same lapsed key at once: the second waits for the first
/// (PostgreSQL: on the key's row, which the first updated; SQLite: for the writer) and
/// then judges the window on the row the first committed, which starts now: it is
/// deduplicated to the first one's job. Two jobs in all, the old holder and one new.
pub async fn enqueue_key_two_producers_take_over_a_lapsed_key_once(db: &TestDb) {
    let old = enqueue_one(db, keyed(QUEUE, "old", "lapsed"), t0()).await;
    finish(db, &old).await;
    let mut tx = db.store.begin().await.expect("begin");
    let params = enqueue_params(vec![keyed(QUEUE, "a", "lapsed")], at(WINDOW_MS + 1_000));
    let first = tx.job_insert(params).await.expect("insert in tx").remove(0);
    assert!(!first.deduplicated, "the lapsed key goes to the new job");
    let store = db.store.clone();
    let params = enqueue_params(vec![keyed(QUEUE, "b", "lapsed")], at(WINDOW_MS + 2_000));
    let racer = spawn_started(async move { store.job_insert(params).await }).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit");
    let second = within(30, "the racing take-over", racer)
        .await
        .expect("racer task")
        .expect("racing job_insert")
        .remove(0);
    assert!(second.deduplicated, "two take-overs of one key: {second:?}");
    assert_eq!(second.job.id, first.job.id);
    let mut stored = ids(&all_jobs(db).await);
    stored.sort_unstable();
    assert_eq!(stored, vec![old.job.id, first.job.id]);
}
