//! Third attack on the put-back of a job awaiting an intent (commit b0e8dcf): a job
//! written dead when its call's outcome is unknown records the key it awaits
//! (`idem_job.awaits_intent`); the failure write (`StoreTx::job_fail_awaiting`) or the
//! resolution (`Idem::settle_intent`), whichever writes last, puts it back in its own
//! transaction.
//!
//! The cases of `awaiting_intent.rs`, `attack_awaiting.rs` and `attack_awaiting_2.rs`
//! are not repeated. Each case says whether it found a defect (it failed on b0e8dcf, and is
//! fixed) or held. Races are replayed on PostgreSQL: one transaction holds its row lock until the
//! other's statement waits for it.

mod common;

use common::awaiting::*;
use common::*;
use idem::intent::{Lookup, ReconcileOptions, awaiting_reconciliation};
use idem::{
    EffectClass, Handler, IntentRow, IntentState, JobContext, JobError, JobRow, JobState,
    PurgeTarget, WorkerProtocol,
};
use idem_store::{IntentBegun, JobRetry};
use idem_store_tests::TestDb;
use idem_store_tests::fixture::{assert_waits_for, spawn_started};
use serde_json::json;

/// Claims the next `pay` job, which must be `id`.
async fn claim(protocol: &WorkerProtocol, id: i64) -> JobRow {
    let job = protocol.claim(claim_one()).await.unwrap().remove(0);
    assert_eq!(job.id, id, "the job claimed");
    job
}

/// Found by the attack (both stores), fixed. The resolution of a key puts back every job
/// awaiting it "to find the stored outcome" (ARCHITECTURE.md), but the intent purge
/// (`purge/intents.sql`) keeps a settled intent only while *the job its `job_id` names*
/// may still run. A second job of the same logical request that the resolution put back
/// is not protected: once the first job has run and completed, the completed intent is
/// purgeable, and if the second job has not run yet (a paused or backlogged queue past
/// the intent retention, 3 days by default) it begins the key afresh: a new intent,
/// `Begun`, and the applied call is sent a second time. The same gap the dead-job purge
/// had for `awaits_intent` (attack_awaiting_2.rs), on the intent side.
///
/// Replay: A holds the key and marks it unknown, fails awaiting it (dead); B meets it and
/// fails awaiting it (dead). The operator settles it applied: both put back. A runs,
/// finds the stored outcome, completes. The intent retention passes (a cutoff past the
/// resolution). B runs and begins the key.
async fn the_intent_purge_keeps_an_intent_a_put_back_job_has_yet_to_read(db: &TestDb) {
    let (idem, protocol, a, _) = dead_awaiting_unknown_intent(db).await;
    let b = second_job_awaiting(&idem, &protocol).await;
    let (settled, back) = idem.resolve_intent(KEY, applied()).await.unwrap();
    assert_eq!((settled.state, back), (IntentState::Completed, true));

    let a = claim(&protocol, a.id).await;
    let met = begin(&idem, a.lease_token()).await;
    assert!(matches!(met, IntentBegun::Completed(_)), "{met:?}");
    protocol.complete(a.lease_token(), None).await.unwrap();

    // The intent retention passes while B waits in its queue.
    let past_retention = db.store.now().await.unwrap() + chrono::Duration::hours(1);
    let purged = idem
        .purge_before(PurgeTarget::Intents, past_retention, 100, |_| {})
        .await
        .unwrap();

    let b = claim(&protocol, b.id).await;
    let met = begin(&idem, b.lease_token()).await;
    assert!(
        matches!(met, IntentBegun::Completed(_)),
        "job {} was put back by the resolution of {KEY:?} to find its stored outcome, but \
         the intent purge deleted the intent ({purged} purged) because its holder (job {}) \
         had completed; B's begin now reserves the key afresh and sends the applied call \
         again: {met:?}",
        b.id,
        a.id
    );
}

/// A `pay` handler whose lookup finds the call applied (the reconciler's view).
struct Pay;

impl Handler for Pay {
    const KIND: &'static str = "pay";
    const EFFECT: EffectClass = EffectClass::UnkeyedRemote;
    type Args = serde_json::Value;

    async fn run(&self, _cx: &mut JobContext, _args: serde_json::Value) -> Result<(), JobError> {
        Ok(())
    }

    async fn lookup(&self, _intent: &IntentRow, _args: serde_json::Value) -> Lookup {
        Lookup::Applied {
            remote_refs: vec!["r-1".into()],
            result: json!({"id": "r-1"}),
        }
    }
}

/// Found by the attack (both stores), fixed. The reconciler looks an unknown intent up through
/// the job its `job_id` names (`Reconciler::lookup`: `job_get(row.job_id)`, then that
/// job's kind's handler) and skips it when that job is gone. Two jobs of one logical
/// request await one key; the operator discards the first (the key's holder: a
/// duplicate submission, its twin still awaiting) with `idem dead discard`, which deletes
/// any dead job whatever it holds. From then on every reconciler pass skips the intent
/// (`skipped`), although the handler of the second job, of the same kind and request,
/// could look it up: the second job stays dead, its intent `unknown` (not `manual`), and
/// the dead-job purge keeps it forever, with nothing to tell anyone it is stuck.
///
/// Replay: A holds the key and marks it unknown, fails awaiting it; B meets it and fails
/// awaiting it. A is discarded. A reconciler with a `pay` handler whose lookup answers
/// applied runs.
async fn an_intent_whose_holder_was_discarded_is_still_reconciled(db: &TestDb) {
    let (idem, protocol, a, _) = dead_awaiting_unknown_intent(db).await;
    let b = second_job_awaiting(&idem, &protocol).await;
    let gone = idem.discard_jobs(vec![a.id]).await.unwrap();
    assert_eq!(gone, vec![a.id], "the operator discards the duplicate");

    let mut w = idem.worker(config(QUEUE, 1)).unwrap();
    w.register(Pay).unwrap();
    let report = w
        .reconciler()
        .run(ReconcileOptions::default())
        .await
        .unwrap();

    assert_eq!(
        (
            intent_row(&idem).await.state,
            state_of(&idem, b.id).await,
            report.skipped
        ),
        (IntentState::Completed, JobState::Available, 0),
        "job {} awaits {KEY:?}, whose holder (job {}) was discarded: the reconciler skips \
         the intent on every pass and the job stays dead ({report:?})",
        b.id,
        a.id
    );
}

/// Found by the attack (PostgreSQL), fixed. A deadlock between a resolution and an operator's
/// retry of the jobs awaiting its key. The resolution's put-back (`job/put_back.sql`)
/// locks the dead jobs awaiting the key in the order its scan meets them, the retry
/// (`job/retry.sql`) in id order. On a small table the planner scans `idem_job_state`
/// (`state, id`: id order, no cycle); once the dead-letter table holds a few thousand
/// jobs and is analyzed, it scans the partial index `idem_job_awaits_intent`, whose
/// equal keys come in heap (TID) order: the order the dead writes were made. Two jobs awaiting one key whose dead writes were made in the other order than
/// their ids (the twin that met the unknown intent stopped first, the holder after) and
/// an `idem dead retry` of both while `idem reconcile` or `idem intents resolve` settles
/// the key: each holds one row and waits for the other's. PostgreSQL aborts one ("deadlock
/// detected"): the operator's resolution (or the reconciler's whole pass) fails. No job
/// is lost (the loser rolls back), but ARCHITECTURE.md's "no cycle forms" does not hold.
///
/// Replay: A (lower id) holds the key and marks it unknown; B meets it and fails awaiting
/// it (dead) first, then A fails awaiting it (dead). An open transaction stands for the
/// retry statement of [A, B] after its first row: it has retried A. The resolution
/// starts: it resolves the intent, its put-back takes B and waits for A. The retry goes
/// on to B.
async fn a_resolution_and_an_operator_retry_of_its_jobs_do_not_deadlock(db: &TestDb) {
    // A dead-letter table of some size (dead jobs of other kinds, awaiting nothing).
    db.store
        .query(
            "INSERT INTO idem_job (kind, queue, args, state, max_attempts, run_at, \
             created_at, finalized_at) SELECT 'other', 'elsewhere', '{}', 'dead', 1, now(), \
             now(), now() FROM generate_series(1, 5000)",
            &[],
        )
        .await
        .unwrap();
    let (idem, protocol, a, unknown) = running_with_unknown_intent(db).await;
    let b = second_job_awaiting(&idem, &protocol).await;
    let dead = protocol
        .fail(&a, awaiting_reconciliation(&unknown))
        .await
        .unwrap();
    assert_eq!(dead.state, JobState::Dead);
    assert!(a.id < b.id);
    let order: Vec<i64> = db
        .store
        .query(
            "SELECT id FROM idem_job WHERE awaits_intent = $1 ORDER BY ctid",
            &[idem_store::SqlValue::Text(KEY.into())],
        )
        .await
        .unwrap()
        .into_iter()
        .map(|mut r| match r.remove(0) {
            idem_store::SqlValue::Int(i) => i,
            other => panic!("{other:?}"),
        })
        .collect();
    // The statistics autovacuum gathers on such a table.
    db.store.query("ANALYZE idem_job", &[]).await.unwrap();
    let plan = db
        .store
        .query(
            "EXPLAIN UPDATE idem_job SET attempt = 0 \
             WHERE awaits_intent = 'pay:order-1' AND state = 'dead'",
            &[],
        )
        .await
        .unwrap();
    let plan: Vec<String> = plan.into_iter().map(|r| format!("{:?}", r[0])).collect();
    assert!(
        plan.iter().any(|l| l.contains("idem_job_awaits_intent")),
        "the put-back scans the awaits_intent index: {plan:?}"
    );
    assert_eq!(order, vec![b.id, a.id], "B's row version comes first");

    let mut retry = db.store.begin().await.unwrap();
    let first = retry
        .job_retry(JobRetry {
            ids: vec![a.id],
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(first.len(), 1);

    let resolver = idem.clone();
    let resolving =
        spawn_started(async move { resolver.resolve_intent(KEY, applied()).await }).await;
    assert_waits_for(db, &mut retry, &resolving).await;

    let second = retry
        .job_retry(JobRetry {
            ids: vec![b.id],
            now: None,
        })
        .await;
    let committed = match second {
        Ok(_) => retry.commit().await.map(|_| ()),
        Err(e) => Err(e),
    };
    let resolved = resolving.await.unwrap();
    assert!(
        committed.is_ok() && resolved.is_ok(),
        "the retry ({committed:?}) or the resolution ({resolved:?}) was aborted by a deadlock"
    );
}

/// Held (both stores): a job awaiting another job's intent is not put back by the
/// parking of that intent as `manual` by the reconciler (lookup cannot tell) and the
/// intent is not purged while parked; the operator's later resolution from `manual`
/// puts it back, and it finds the stored outcome.
async fn a_job_awaiting_a_parked_intent_finds_its_outcome_after_the_operator(db: &TestDb) {
    let (idem, protocol, a, b) = two_awaiting_a_parked_intent(db).await;
    let far = db.store.now().await.unwrap() + chrono::Duration::days(30);
    idem.purge_before(PurgeTarget::Intents, far, 100, |_| {})
        .await
        .unwrap();
    assert_eq!(
        (state_of(&idem, a.id).await, state_of(&idem, b.id).await),
        (JobState::Dead, JobState::Dead)
    );
    let (settled, back) = idem.resolve_intent(KEY, applied()).await.unwrap();
    assert_eq!((settled.state, back), (IntentState::Completed, true));
    let a = claim(&protocol, a.id).await;
    let met = begin(&idem, a.lease_token()).await;
    assert!(matches!(met, IntentBegun::Completed(_)), "{met:?}");
    assert_eq!(state_of(&idem, b.id).await, JobState::Available);
}

/// Held (PostgreSQL): an intent purge in flight while a job's failure write holds the
/// intent's share lock: the purge cannot delete an unknown intent, and the job's write
/// finds it and waits (dead, awaiting), not `Gone`.
async fn an_intent_purge_never_takes_the_intent_a_dead_write_is_reading(db: &TestDb) {
    let (idem, protocol, a, unknown) = running_with_unknown_intent(db).await;
    let mut purge = db.store.begin().await.unwrap();
    let far = db.store.now().await.unwrap() + chrono::Duration::days(30);
    let n = purge
        .purge(idem_store::Purge {
            target: PurgeTarget::Intents,
            before: far,
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(n, 0, "an unknown intent is never purged");
    purge.commit().await.unwrap();
    let dead = protocol
        .fail(&a, awaiting_reconciliation(&unknown))
        .await
        .unwrap();
    assert_eq!(dead.state, JobState::Dead);
    let (_, back) = idem.resolve_intent(KEY, applied()).await.unwrap();
    assert!(back);
}

idem_store_tests::store_cases!(
    the_intent_purge_keeps_an_intent_a_put_back_job_has_yet_to_read,
    an_intent_whose_holder_was_discarded_is_still_reconciled,
    a_job_awaiting_a_parked_intent_finds_its_outcome_after_the_operator,
    an_intent_purge_never_takes_the_intent_a_dead_write_is_reading,
);

idem_store_tests::postgres_cases!(a_resolution_and_an_operator_retry_of_its_jobs_do_not_deadlock,);
