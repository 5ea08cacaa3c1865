//! Intents under concurrency: the unique key is the only arbiter of who holds an intent,
//! and the job's claim is checked in the same write, so racing begins of one key —
//! fresh, or taking over a lapsed holder — give it to exactly one of them, and a begin
//! racing a rescue of its job is refused.
//!
//! Two cases race for real (tasks started together on a barrier). The others replay one
//! interleaving deterministically without sleeps: a transaction holds its write open,
//! the racer is started and shown to wait for it ([`assert_waits_for`]: on PostgreSQL
//! the server reports it blocked on that transaction, on SQLite it queues for the single
//! writer), and only then does the transaction end. The racer must then judge the row
//! as committed — never a snapshot from before it waited. The same holds for a purge
//! racing the audit sweep's resolution.

use std::sync::Arc;

use idem_store::{
    IntentBegin, IntentBegun, IntentFinish, IntentOutcome, IntentResolution, IntentResolve,
    IntentRow, IntentState, JobRescue, JobRow, Purge, PurgeTarget, StoreResult, StoreTx,
};
use tokio::sync::Barrier;

use super::intent::{
    ENDS, applied, assert_intent_lost, begin, begun, claimed, finish, fresh, keyed, stored, taken,
};
use crate::TestDb;
use crate::fixture::{
    LEASE_MS, assert_lease_lost, assert_waits_for, at, claim_params, complete, ids, spawn_started,
};
use crate::harness::within;

/// How many keys the real races contend for, one race each.
const ROUNDS: usize = 20;

/// Starts `params` on another connection; returns once the task runs.
async fn spawn_begin(
    db: &TestDb,
    params: IntentBegin,
) -> tokio::task::JoinHandle<StoreResult<IntentBegun>> {
    let store = db.store.clone();
    spawn_started(async move { store.intent_begin(params).await }).await
}

/// The answer of a begin started with [`spawn_begin`].
async fn answer(racer: tokio::task::JoinHandle<StoreResult<IntentBegun>>) -> IntentBegun {
    let got = within(30, "the racing begin", racer).await;
    got.expect("begin task").expect("racing intent_begin")
}

/// Begins `params` inside `tx`, which must take the key.
async fn begun_in(tx: &mut Box<dyn StoreTx>, params: IntentBegin) -> IntentRow {
    begun(tx.intent_begin(params).await.expect("intent_begin in tx"))
}

/// Runs one begin per params at once, each in its own task and transaction, lined up on
/// a barrier; their answers in the order given.
async fn race(db: &TestDb, racers: Vec<IntentBegin>) -> Vec<IntentBegun> {
    let start = Arc::new(Barrier::new(racers.len()));
    let tasks: Vec<_> = racers
        .into_iter()
        .map(|params| {
            let (store, start) = (db.store.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                store.intent_begin(params).await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        let got = within(60, "a concurrent begin", task).await;
        answers.push(got.expect("begin task").expect("concurrent intent_begin"));
    }
    answers
}

/// Asserts that exactly one of `answers` is `Begun` and all others are `InProgress`
/// with the winner's row; returns it.
#[track_caller]
fn assert_one_holder(answers: &[IntentBegun]) -> IntentRow {
    let winners: Vec<&IntentRow> = answers
        .iter()
        .filter_map(|a| match a {
            IntentBegun::Begun(row) => Some(row),
            _ => None,
        })
        .collect();
    assert_eq!(winners.len(), 1, "exactly one begin holds it: {answers:?}");
    let winner = winners[0].clone();
    for a in answers
        .iter()
        .filter(|a| !matches!(a, IntentBegun::Begun(_)))
    {
        assert_eq!(a, &IntentBegun::InProgress(winner.clone()), "the loser");
    }
    winner
}

/// Two claims of two running jobs begin the same new key at the same time, each in its
/// own transaction: exactly one is `Begun` (fence 1, attempt 1), the other is
/// `InProgress` with the winner's row, which is what is stored.
pub async fn intent_begin_concurrently_gives_the_key_once(db: &TestDb) {
    let a = claimed(db, "q-a").await;
    let b = claimed(db, "q-b").await;
    for round in 0..ROUNDS {
        let key = format!("race:{round}");
        let answers = race(db, vec![keyed(&key, &a, 1_000), keyed(&key, &b, 1_000)]).await;
        let winner = assert_one_holder(&answers);
        assert_eq!((winner.fence, winner.attempt), (1, 1), "{key}");
        assert_eq!(stored(db, &key).await, Some(winner));
    }
}

/// Two claims take over the same lapsed intent at the same time: exactly one is `Begun`
/// (attempt 2, fence 2), the other `InProgress` with its row — never two holders.
pub async fn intent_takeover_concurrently_gives_the_key_once(db: &TestDb) {
    let holder = claimed(db, "q-h").await;
    let a = claimed(db, "q-a").await;
    let b = claimed(db, "q-b").await;
    for round in 0..ROUNDS {
        let key = format!("race:{round}");
        begun(begin(db, &key, &holder, 1_000).await);
        let racers = vec![keyed(&key, &a, ENDS + 1), keyed(&key, &b, ENDS + 1)];
        let answers = race(db, racers).await;
        let winner = assert_one_holder(&answers);
        assert_eq!((winner.fence, winner.attempt), (2, 2), "{key}");
        assert_eq!(stored(db, &key).await, Some(winner));
    }
}

/// A begin of a key whose reservation another transaction has made but not committed
/// waits for it, and then answers `InProgress` with the committed row: it neither
/// inserts a second holder nor reports a key it found held but could not read.
pub async fn intent_begin_waits_for_an_uncommitted_reservation(db: &TestDb) {
    let first = claimed(db, "q-1").await;
    let second = claimed(db, "q-2").await;
    let mut tx = db.store.begin().await.expect("begin");
    let held = begun_in(&mut tx, keyed("pay:1", &first, 1_000)).await;
    let racer = spawn_begin(db, keyed("pay:1", &second, 2_000)).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit");
    assert_eq!(answer(racer).await, IntentBegun::InProgress(held.clone()));
    assert_eq!(stored(db, "pay:1").await, Some(held));
}

/// A begin of a key whose reservation another transaction made and then rolled back
/// waits for it, and then takes the key itself: `Begun`, fence 1, attempt 1.
pub async fn intent_begin_takes_a_key_whose_reservation_rolled_back(db: &TestDb) {
    let first = claimed(db, "q-1").await;
    let second = claimed(db, "q-2").await;
    let mut tx = db.store.begin().await.expect("begin");
    begun_in(&mut tx, keyed("pay:1", &first, 1_000)).await;
    let racer = spawn_begin(db, keyed("pay:1", &second, 2_000)).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.rollback().await.expect("rollback");
    let expected = fresh("pay:1", &second, 2_000);
    assert_eq!(answer(racer).await, IntentBegun::Begun(expected.clone()));
    assert_eq!(stored(db, "pay:1").await, Some(expected));
}

/// A begin by a claim whose job a rescue has taken back and claimed again, in a
/// transaction not yet committed, waits for that transaction and then sees it:
/// `LeaseLost`, nothing inserted (a check against the job as it was before the rescue
/// would let the old claim reserve the key). The new claim then takes the key.
pub async fn intent_begin_waits_for_a_rescue_and_is_refused(db: &TestDb) {
    let old = claimed(db, "q-r").await;
    let late = 10 * LEASE_MS;
    let mut rescue = db.store.begin().await.expect("begin");
    let params = JobRescue {
        limit: 10,
        retry_in_ms: 0,
        max_attempts: None,
        now: Some(at(late)),
    };
    let rescued = rescue.job_rescue(params).await.expect("job_rescue");
    assert_eq!(ids(&rescued), vec![old.id]);
    let again = rescue.job_claim(claim_params("q-r", 1, at(late))).await;
    let new: JobRow = again.expect("job_claim").remove(0);
    assert_eq!((new.id, new.fence), (old.id, old.fence + 1));
    let racer = spawn_begin(db, keyed("pay:1", &old, late)).await;
    assert_waits_for(db, &mut rescue, &racer).await;
    rescue.commit().await.expect("commit the rescue");
    let got = within(30, "the stale begin", racer).await;
    assert_lease_lost(got.expect("begin task"), old.lease_token());
    assert_eq!(stored(db, "pay:1").await, None, "nothing inserted");
    let taken = begin(db, "pay:1", &new, late + 1).await;
    assert_eq!(taken, IntentBegun::Begun(fresh("pay:1", &new, late + 1)));
}

/// Two takeovers of one lapsed intent, the first held open uncommitted: the second
/// waits, then judges the lease on the row the first committed, which is live: it
/// answers `InProgress` with that row (attempt 2), not a second takeover.
pub async fn intent_takeover_waits_for_another_takeover(db: &TestDb) {
    let holder = claimed(db, "q-h").await;
    let a = claimed(db, "q-a").await;
    let b = claimed(db, "q-b").await;
    begun(begin(db, "pay:1", &holder, 1_000).await);
    let mut tx = db.store.begin().await.expect("begin");
    let taken = begun_in(&mut tx, keyed("pay:1", &a, ENDS + 1)).await;
    assert_eq!((taken.attempt, taken.fence), (2, 2));
    let racer = spawn_begin(db, keyed("pay:1", &b, ENDS + 2)).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit");
    assert_eq!(answer(racer).await, IntentBegun::InProgress(taken.clone()));
    assert_eq!(stored(db, "pay:1").await, Some(taken));
}

/// The outcome of a zombie holder racing the takeover of its intent, not yet committed,
/// waits for it and is then refused: `IntentLost`, and the new holder's row stands.
pub async fn intent_finish_waits_for_a_takeover_and_is_lost(db: &TestDb) {
    let zombie_job = claimed(db, "q-z").await;
    let taker = claimed(db, "q-t").await;
    let zombie = begun(begin(db, "pay:1", &zombie_job, 1_000).await);
    let mut tx = db.store.begin().await.expect("begin");
    let taken = begun_in(&mut tx, keyed("pay:1", &taker, ENDS + 1)).await;
    let store = db.store.clone();
    let params = IntentFinish {
        token: zombie.token(),
        outcome: applied("pay:1"),
        now: Some(at(ENDS + 2)),
    };
    let racer = spawn_started(async move { store.intent_finish(params).await }).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit the takeover");
    let got = within(30, "the zombie's finish", racer).await;
    assert_intent_lost(got.expect("finish task"), &zombie.token());
    assert_eq!(stored(db, "pay:1").await, Some(taken));
}

/// A takeover racing the outcome of a holder past its lease, not yet committed, waits
/// for it and then answers that outcome (`Completed` with the result): the holder's
/// call is never made a second time.
pub async fn intent_takeover_waits_for_the_holders_finish(db: &TestDb) {
    let holder = claimed(db, "q-h").await;
    let taker = claimed(db, "q-t").await;
    let held = begun(begin(db, "pay:1", &holder, 1_000).await);
    let mut tx = db.store.begin().await.expect("begin");
    let params = IntentFinish {
        token: held.token(),
        outcome: applied("pay:1"),
        now: Some(at(ENDS + 1)),
    };
    let done = tx.intent_finish(params).await.expect("finish in tx");
    let racer = spawn_begin(db, keyed("pay:1", &taker, ENDS + 2)).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit the finish");
    assert_eq!(answer(racer).await, IntentBegun::Completed(done.clone()));
    assert_eq!(stored(db, "pay:1").await, Some(done));
}

/// A begin racing the release of the key's intent, not yet committed, waits for it and
/// then takes the released key: `Begun`, with attempt and fence moved on.
pub async fn intent_begin_waits_for_a_release_and_takes_the_key(db: &TestDb) {
    let holder = claimed(db, "q-h").await;
    let next = claimed(db, "q-n").await;
    let held = begun(begin(db, "mail:1", &holder, 1_000).await);
    let mut tx = db.store.begin().await.expect("begin");
    let params = IntentFinish {
        token: held.token(),
        outcome: IntentOutcome::Released,
        now: Some(at(2_000)),
    };
    let released = tx.intent_finish(params).await.expect("release");
    assert_eq!(released.state, IntentState::Released);
    let racer = spawn_begin(db, keyed("mail:1", &next, 3_000)).await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit the release");
    let expected = taken("mail:1", &held, &next, 3_000);
    assert_eq!(answer(racer).await, IntentBegun::Begun(expected.clone()));
    assert_eq!(stored(db, "mail:1").await, Some(expected));
}

/// A purge that picked a completed intent past its retention while the audit sweep was
/// resolving it `duplicate` leaves it alone once the resolution commits (PostgreSQL: the
/// delete waits for the row and re-checks its state; SQLite: the purge queues behind
/// the resolution): a duplicate awaits an operator.
pub async fn intent_purge_spares_an_intent_resolved_meanwhile(db: &TestDb) {
    let job = claimed(db, "q-1").await;
    let held = begun(begin(db, "audit:1", &job, 1_000).await);
    let done = finish(db, held.token(), applied("audit:1"), 2_000).await;
    let done = done.expect("finish");
    complete(db, job.lease_token(), at(3_000))
        .await
        .expect("complete");
    let mut audit = db.store.begin().await.expect("begin");
    let params = IntentResolve {
        token: done.token(),
        from: vec![IntentState::Completed],
        resolution: IntentResolution::Duplicate {
            remote_refs: vec!["ch_a".into(), "ch_b".into()],
        },
        now: Some(at(4_000)),
    };
    let dup = audit.intent_resolve(params).await.expect("resolve in tx");

    let store = db.store.clone();
    let params = Purge {
        target: PurgeTarget::Intents,
        before: at(10_000),
        limit: 10,
    };
    let purge = spawn_started(async move { store.purge(params).await }).await;
    assert_waits_for(db, &mut audit, &purge).await;
    audit.commit().await.expect("commit the resolution");
    let purged = within(30, "the purge", purge).await.expect("purge task");
    assert_eq!(purged.expect("purge"), 0, "a duplicate is kept");
    assert_eq!(stored(db, "audit:1").await, Some(dup));
}
