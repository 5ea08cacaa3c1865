//! Attacks on the intent rules of the seam, replayed deterministically.
//!
//! The purge of intents keeps "those of a job that may still run again (it exists and is
//! not completed), which must find its intent's stored outcome instead of calling again"
//! (`purge/intents.sql`). On PostgreSQL a purge that waited on a row lock re-checks its
//! outer `WHERE` against the intent's latest version, but the job-state subquery of
//! that `WHERE` still reads the statement's starting snapshot (DESIGN.md 7a: a value
//! computed from other rows is computed after the row is locked, never from the
//! statement's starting snapshot).

use idem_store::{IntentOutcome, IntentRow, IntentState, Purge, PurgeTarget};

use super::intent::{applied, begin, begun, claimed, finish, stored};
use crate::fixture::{assert_waits_for, at, complete, fail, job_in, running, spawn_started};
use crate::harness::within;
use crate::{Backend, TestDb};

const DAY_MS: i64 = 86_400_000;

/// A purge of intents past their retention picks a `released` intent whose job is gone
/// (a dead job, purged). While the purge waits for the lock on another intent it
/// picked, a new job of the same logical request (an operator's re-enqueue) takes the
/// released intent, makes the call and records it `completed`; the job itself has not
/// completed yet (its completion is the next transaction). The purge then reaches the
/// intent: state and age still match, and the new job is not in the purge's snapshot,
/// so it counts as gone. The completed intent of a running job is deleted, and the
/// job's next attempt is told to send again, under fence 1 again.
pub async fn intent_purge_spares_the_intent_of_a_job_that_took_it_meanwhile(db: &TestDb) {
    // An old completed intent of a completed job: purged, and the row the purge waits on.
    let done_job = claimed(db, "q-0").await;
    let done = begun(begin(db, "a:0", &done_job, 1_000).await);
    finish(db, done.token(), applied("a:0"), 2_000)
        .await
        .expect("finish a:0");
    complete(db, done_job.lease_token(), at(3_000))
        .await
        .expect("complete q-0");
    // The old released intent: its call never left, its job died and was purged.
    let gone_job = claimed(db, "q-1").await;
    let first = begun(begin(db, "b:1", &gone_job, 1_000).await);
    finish(db, first.token(), IntentOutcome::Released, 2_000)
        .await
        .expect("release b:1");
    fail(db, gone_job.lease_token(), None, at(3_000))
        .await
        .expect("the job dies");
    let dead = Purge {
        target: PurgeTarget::DeadJobs,
        before: at(4_000),
        limit: 10,
    };
    assert_eq!(db.store.purge(dead).await.expect("purge dead jobs"), 1);

    let purge = Purge {
        target: PurgeTarget::Intents,
        before: at(4 * DAY_MS),
        limit: 10,
    };
    let taker_at = 4 * DAY_MS + 1_000;
    let taken: IntentRow = match db.backend {
        Backend::Postgres => {
            let mut hold = db.store.begin().await.expect("begin");
            let lock = "SELECT key FROM idem_intent WHERE key = 'a:0' FOR UPDATE";
            hold.query(lock, &[]).await.expect("lock a:0");
            let store = db.store.clone();
            let purging = spawn_started(async move { store.purge(purge).await }).await;
            assert_waits_for(db, &mut hold, &purging).await;
            let taker = running(db, job_in("q-2", "charge"), at(taker_at)).await;
            let took = begun(begin(db, "b:1", &taker, taker_at + 1).await);
            assert_eq!(took.fence, first.fence + 1, "{took:?}");
            let rec = finish(db, took.token(), applied("b:1"), taker_at + 2).await;
            let rec = rec.expect("the taker records its call");
            hold.commit().await.expect("release a:0");
            let purged = within(30, "the purge", purging).await.expect("purge task");
            purged.expect("purge");
            rec
        }
        Backend::Sqlite => {
            // One writer: the purge runs before or after the taker, never in between.
            let taker = running(db, job_in("q-2", "charge"), at(taker_at)).await;
            let took = begun(begin(db, "b:1", &taker, taker_at + 1).await);
            let rec = finish(db, took.token(), applied("b:1"), taker_at + 2).await;
            let rec = rec.expect("the taker records its call");
            db.store.purge(purge).await.expect("purge");
            rec
        }
    };
    assert_eq!(stored(db, "a:0").await, None, "the old intent is purged");
    let kept = stored(db, "b:1").await;
    let again = match &kept {
        Some(_) => None,
        None => {
            let taker = crate::fixture::get(db, taken.job_id).await;
            Some(begin(db, "b:1", &taker, taker_at + 3).await)
        }
    };
    assert_eq!(
        kept.as_ref().map(|r| r.state),
        Some(IntentState::Completed),
        "the completed intent of job {} (still running) was purged; its next begin: {again:?}",
        taken.job_id,
    );
}

/// A begin by a claim whose job an operator is cancelling in an open transaction waits
/// for the cancel and is then refused (`LeaseLost`), writing no intent: a cancelled job
/// never reserves a call (PostgreSQL: the begin's `FOR SHARE` on the job re-checks the
/// committed row).
pub async fn intent_begin_waits_for_a_cancel_and_is_refused(db: &TestDb) {
    let job = claimed(db, "q-1").await;
    let mut tx = db.store.begin().await.expect("begin");
    let params = idem_store::JobCancel {
        job_id: job.id,
        now: Some(at(500)),
    };
    tx.job_cancel(params).await.expect("cancel in tx");
    let store = db.store.clone();
    let params = super::intent::keyed("c:1", &job, 1_000);
    let racer = spawn_started(async move { store.intent_begin(params).await }).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit the cancel");
    let got = within(30, "the begin", racer).await.expect("begin task");
    crate::fixture::assert_lease_lost(got, job.lease_token());
    assert_eq!(stored(db, "c:1").await, None);
}

/// An operator's resolution and the reconciler's, both from the `unknown` intent as read
/// at one fence: the one that waited re-checks state and fence on the committed row and
/// is refused (`Conflict`); the first one's outcome stands.
pub async fn intent_resolve_racing_another_resolution_is_refused(db: &TestDb) {
    let job = claimed(db, "q-1").await;
    let held = begun(begin(db, "r:1", &job, 1_000).await);
    let unknown = IntentOutcome::Unknown {
        error: "timed out".into(),
    };
    let read = finish(db, held.token(), unknown, 2_000)
        .await
        .expect("unknown");
    let from = vec![IntentState::Unknown, IntentState::Manual];
    let mut tx = db.store.begin().await.expect("begin");
    let applied = idem_store::IntentResolve {
        token: read.token(),
        from: from.clone(),
        resolution: idem_store::IntentResolution::Applied {
            result: serde_json::json!({"id": "ch_1"}),
            remote_refs: vec!["ch_1".into()],
        },
        now: Some(at(3_000)),
    };
    let settled = tx.intent_resolve(applied).await.expect("applied in tx");
    let store = db.store.clone();
    let absent = idem_store::IntentResolve {
        token: read.token(),
        from,
        resolution: idem_store::IntentResolution::Absent,
        now: Some(at(3_001)),
    };
    let racer = spawn_started(async move { store.intent_resolve(absent).await }).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit applied");
    let got = within(30, "the racing resolution", racer)
        .await
        .expect("task");
    assert!(
        matches!(got, Err(idem_store::StoreError::Conflict(_))),
        "{got:?}"
    );
    assert_eq!(stored(db, "r:1").await, Some(settled));
}
