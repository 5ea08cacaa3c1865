//! Fourth attack on the put-back of a job awaiting an intent (commit 3b0a486). New since
//! the third: `awaits_intent` stays on a job after its put-back (and an operator retry),
//! so the intent purge keeps the outcome it is to read.
//!
//! The cases of `awaiting_intent.rs` and `attack_awaiting*.rs` are not repeated. Each
//! case says whether it found a defect (it failed on 3b0a486, and is fixed by keeping
//! the key in `awaited_intent` and clearing `awaits_intent` at a put-back) or held.

mod common;

use common::awaiting::*;
use common::*;
use idem::intent::awaiting_reconciliation;
use idem::{IntentResolution, IntentState, Job, JobError, JobRow, JobState, WorkerProtocol};
use idem_store::{IntentBegun, JobRescue};
use idem_store_tests::TestDb;
use serde_json::json;

/// Claims the next `pay` job, which must be `id`.
async fn claim(protocol: &WorkerProtocol, id: i64) -> JobRow {
    let job = protocol.claim(claim_one()).await.unwrap().remove(0);
    assert_eq!(job.id, id, "the job claimed");
    job
}

/// A dead awaiting `KEY` (unknown); the operator settles it absent (released): A is put
/// back, and is claimed again. Returns the client, the protocol and A's new claim.
async fn put_back_after_release(db: &TestDb) -> (idem::Idem, WorkerProtocol, JobRow) {
    let (idem, protocol, a, _) = dead_awaiting_unknown_intent(db).await;
    let (settled, back) = idem
        .resolve_intent(KEY, IntentResolution::Absent)
        .await
        .unwrap();
    assert_eq!((settled.state, back), (IntentState::Released, true));
    let a = claim(&protocol, a.id).await;
    (idem, protocol, a)
}

/// Job B of the same logical request (a resubmission, same key and fingerprint): it
/// takes the released key (begun, holder B), its call's outcome is unknown, and it stops
/// (dead) to await it.
async fn resubmission_awaiting(idem: &idem::Idem, protocol: &WorkerProtocol) -> JobRow {
    let id = idem
        .enqueue(Job::new("pay", json!({"order": 1, "copy": 2})).queue(QUEUE))
        .await
        .unwrap()
        .job
        .id;
    let b = claim(protocol, id).await;
    let IntentBegun::Begun(held) = begin(idem, b.lease_token()).await else {
        panic!("B takes the released key");
    };
    let unknown = mark_unknown(idem, &held).await;
    let dead = protocol
        .fail(&b, awaiting_reconciliation(&unknown))
        .await
        .unwrap();
    assert_eq!(dead.state, JobState::Dead, "B stops to await the intent");
    b
}

/// Found by the attack (both stores), fixed. `awaits_intent` stayed on a job after its put-back, and
/// `job/put_back.sql` puts back *every* dead job naming the key, whatever made it dead.
/// A job put back by a release that then dies for an unrelated reason (a permanent
/// error: an ordinary dead letter, with `last_error` for the operator) still names the
/// key; once the key is taken again (a released intent is begun afresh by a second job
/// of the request) and its outcome is unknown, the resolution resurrects the dead letter
/// with attempt 0, as if an operator had retried it.
///
/// Replay: A awaits the key (unknown); released by the operator, A is put back, claimed,
/// and fails permanently (dead). B (resubmission) begins the released key, its outcome is
/// unknown, B dies awaiting it. The operator settles the key applied.
async fn a_job_dead_for_an_unrelated_reason_is_not_resurrected_by_a_later_resolution(db: &TestDb) {
    let (idem, protocol, a) = put_back_after_release(db).await;
    let dead = protocol
        .fail(&a, JobError::permanent("the order was deleted"))
        .await
        .unwrap();
    assert_eq!(dead.state, JobState::Dead, "an ordinary dead letter");
    let b = resubmission_awaiting(&idem, &protocol).await;

    let (settled, _) = idem.resolve_intent(KEY, applied()).await.unwrap();
    assert_eq!(settled.state, IntentState::Completed);
    assert_eq!(
        state_of(&idem, b.id).await,
        JobState::Available,
        "B is put back"
    );
    let a_now = job(&idem, a.id).await;
    assert_eq!(
        a_now.state,
        JobState::Dead,
        "job {} died of a permanent error ({:?}) after its put-back; the resolution of \
         {KEY:?} for job {} resurrected it (attempt {}) through its stale awaits_intent",
        a.id,
        a_now.last_error,
        b.id,
        a_now.attempt
    );
}

/// Found by the attack (both stores), fixed. Same root as above, against a decided semantics: "a job
/// dead-lettered by the rescuer (attempts used up) is an ordinary dead letter and no
/// resolution puts it back". A job put back once (its `awaits_intent` stays) and then
/// dead-lettered by the rescuer is put back by the next resolution of its old key.
///
/// Replay: A awaits the key, released, put back, claimed; its worker vanishes and the
/// rescuer (a cap of one attempt) dead-letters it. B begins the released key, unknown,
/// dies awaiting. The operator settles the key applied.
async fn a_job_the_rescuer_dead_lettered_after_a_put_back_stays_dead(db: &TestDb) {
    let (idem, protocol, a) = put_back_after_release(db).await;
    let later = db.store.now().await.unwrap() + chrono::Duration::hours(1);
    let rescued = db
        .store
        .job_rescue(JobRescue {
            limit: 100,
            retry_in_ms: 0,
            max_attempts: Some(1),
            now: Some(later),
        })
        .await
        .unwrap();
    assert_eq!(
        rescued.iter().map(|j| (j.id, j.state)).collect::<Vec<_>>(),
        vec![(a.id, JobState::Dead)],
        "the rescuer dead-letters A"
    );
    let b = resubmission_awaiting(&idem, &protocol).await;

    idem.resolve_intent(KEY, applied()).await.unwrap();
    assert_eq!(
        state_of(&idem, b.id).await,
        JobState::Available,
        "B is put back"
    );
    assert_eq!(
        state_of(&idem, a.id).await,
        JobState::Dead,
        "job {} was dead-lettered by the rescuer; the resolution of {KEY:?} for job {} \
         put it back through its stale awaits_intent",
        a.id,
        b.id
    );
}

/// Held (both stores): the attempt history of a job that stopped to await its intent,
/// was put back and then completed (no attempt row for the completion, which
/// `job_attempt/list.sql` synthesizes from the completed job): the stop and the
/// completion, once each, in fence order, the completion last.
async fn the_history_of_a_put_back_job_that_completed_reads_both_attempts(db: &TestDb) {
    let (idem, protocol, a, _) = dead_awaiting_unknown_intent(db).await;
    idem.resolve_intent(KEY, applied()).await.unwrap();
    let a = claim(&protocol, a.id).await;
    let met = begin(&idem, a.lease_token()).await;
    assert!(matches!(met, IntentBegun::Completed(_)), "{met:?}");
    protocol.complete(a.lease_token(), None).await.unwrap();
    let history = idem.attempts(a.id).await.unwrap();
    let seen: Vec<_> = history
        .iter()
        .map(|r| (r.fence, format!("{:?}", r.outcome)))
        .collect();
    assert_eq!(history.len(), 2, "{seen:?}");
    assert!(history[0].fence < history[1].fence, "{seen:?}");
    assert_eq!(format!("{:?}", history[1].outcome), "Completed", "{seen:?}");
    assert_ne!(format!("{:?}", history[0].outcome), "Completed", "{seen:?}");
}

idem_store_tests::store_cases!(
    the_history_of_a_put_back_job_that_completed_reads_both_attempts,
    a_job_dead_for_an_unrelated_reason_is_not_resurrected_by_a_later_resolution,
    a_job_the_rescuer_dead_lettered_after_a_put_back_stays_dead,
);
