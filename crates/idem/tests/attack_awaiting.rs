//! Attacks on the put-back of a job awaiting an intent: a job written dead when its
//! call's outcome is unknown is put back to run by whichever side writes last, the job's
//! failure (`fail_awaiting`) or the resolution (`Idem::settle_intent`).
//!
//! Each case replays one interleaving the design must survive. Those marked "Found by
//! the attack" failed on the first design, which put back whatever dead job an intent
//! named; since then a job records the intent it awaits (`awaits_intent`), and only the
//! resolution of that intent puts it back. The others were checked and held. On
//! PostgreSQL a race is replayed deterministically: one transaction holds a row lock
//! until the other's statement waits for it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::awaiting::*;
use common::*;
use idem::intent::awaiting_reconciliation;
use idem::{IntentResolution, IntentState, Job, JobError, JobState, WorkerProtocol};
use idem_store::{IntentBegun, JobCancel, JobRetry};
use idem_store_tests::TestDb;
use idem_store_tests::fixture::{assert_waits_for, spawn_started};
use serde_json::json;

/// Found by the attack (PostgreSQL), fixed. The first design decided on a plain read of
/// the job (dead) and then wrote with `job/retry.sql`, whose predicate is `state IN
/// ('dead', 'cancelled')`. A job that left `dead` and ended `cancelled` between the two
/// (an operator's retry, then a client's cancel) was un-cancelled by the resolution. Now
/// the put-back's one statement requires `dead` and `awaits_intent`, which the
/// operator's retry clears.
///
/// Replay: the job is dead awaiting its intent. One open transaction stands for the
/// operator's retry and the client's cancel (it retries, then cancels the job, holding
/// its row). The operator's resolution starts: it resolves the intent, reads the job as
/// dead (the holder has not committed) and its put-back waits for the row. The holder
/// commits; the put-back re-checks its predicate on the cancelled row and takes it.
async fn a_resolution_never_uncancels_a_job_cancelled_after_it_read_it_dead(db: &TestDb) {
    let (idem, _protocol, job, _unknown) = dead_awaiting_unknown_intent(db).await;

    let mut holder = db.store.begin().await.unwrap();
    let retried = holder
        .job_retry(JobRetry {
            ids: vec![job.id],
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(retried.len(), 1, "the operator's retry takes the dead job");
    let cancelled = holder
        .job_cancel(JobCancel {
            job_id: job.id,
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);

    let racer_idem = idem.clone();
    let racer = spawn_started(async move { racer_idem.resolve_intent(KEY, applied()).await }).await;
    assert_waits_for(db, &mut holder, &racer).await;
    holder.commit().await.unwrap();

    let resolved = racer.await.unwrap();
    let after = common::job(&idem, job.id).await;
    assert_eq!(
        after.state,
        JobState::Cancelled,
        "a job cancelled by a client was put back to run by the resolution of its intent \
         (resolve_intent returned {resolved:?}; job now {after:?})"
    );
}

/// Found by the attack (both stores); decided: the job's last attempt marked its intent
/// `unknown`, then its worker stopped before writing the failure. The rescuer writes
/// the job dead (no attempts left), an ordinary dead letter, not a job awaiting the
/// intent. The first design put it back if the intent was settled after the rescue and
/// left it dead if settled before: the order decided. Now it stays a dead letter in
/// both orders (an operator's retry finds the stored outcome).
///
/// Replay: max_attempts 1; the intent is marked unknown; `resolve_intent` settles it
/// (the job still runs: no put-back); the clock passes the lease's end and `rescue`
/// runs.
async fn a_job_rescued_dead_after_its_intent_was_settled_stays_a_dead_letter(db: &TestDb) {
    let last_attempt = Job::new("pay", json!({"order": 1}))
        .queue(QUEUE)
        .max_attempts(1);
    let (idem, _protocol, job, _unknown) = running_with_unknown_intent_of(db, last_attempt).await;
    let (settled, retried) = idem.resolve_intent(KEY, applied()).await.unwrap();
    assert_eq!(settled.state, IntentState::Completed);
    assert!(!retried, "the job still runs: nothing to put back");

    let clock = db_clock(db).await;
    clock.advance(Duration::from_secs(3600));
    let rescuer = client(db, Some(Arc::new(clock)));
    let rescued = rescuer.rescue().await.unwrap();
    assert_eq!(rescued.len(), 1, "the job's lease ended: {rescued:?}");
    assert_eq!(state_of(&idem, job.id).await, JobState::Dead);
}

/// The mirror of the case above: rescued dead first, then settled. The resolution puts
/// back only jobs that stopped to await it; this one used up its attempts.
async fn a_job_rescued_dead_before_its_intent_is_settled_stays_a_dead_letter(db: &TestDb) {
    let last_attempt = Job::new("pay", json!({"order": 1}))
        .queue(QUEUE)
        .max_attempts(1);
    let (idem, _protocol, job, _unknown) = running_with_unknown_intent_of(db, last_attempt).await;
    let clock = db_clock(db).await;
    clock.advance(Duration::from_secs(3600));
    let rescuer = client(db, Some(Arc::new(clock)));
    assert_eq!(rescuer.rescue().await.unwrap().len(), 1);
    assert_eq!(state_of(&idem, job.id).await, JobState::Dead);

    let (settled, retried) = idem.resolve_intent(KEY, applied()).await.unwrap();
    assert_eq!((settled.state, retried), (IntentState::Completed, false));
    assert_eq!(state_of(&idem, job.id).await, JobState::Dead);
}

/// Found by the attack (both stores), fixed. The first design put back whatever dead job
/// the intent named, whatever killed it. A job whose attempt marked the intent unknown
/// and then ended permanently for another reason (a worker's `JobError::permanent`, an
/// HTTP client's `outcome: permanent` without `awaits_intent`) was resurrected with
/// attempt 0 by `idem intents resolve` or the reconciler.
///
/// Replay: the intent is marked unknown; the job fails permanently with no `awaits`;
/// the operator settles the intent.
async fn a_resolution_never_resurrects_a_job_dead_for_another_reason(db: &TestDb) {
    let (idem, protocol, job, _unknown) = running_with_unknown_intent(db).await;
    let gone = protocol
        .fail(
            &job,
            JobError::permanent("the order was refunded: nothing to do"),
        )
        .await
        .unwrap();
    assert_eq!(gone.state, JobState::Dead);

    let (settled, retried) = idem.resolve_intent(KEY, applied()).await.unwrap();
    assert_eq!(settled.state, IntentState::Completed);
    let after = common::job(&idem, job.id).await;
    assert!(
        !retried && after.state == JobState::Dead,
        "a job that failed permanently (not awaiting the intent) was put back to run \
         with a fresh attempt count by the intent's resolution (retried {retried}, job \
         now {after:?})"
    );
}

/// Found by the attack (both stores), fixed. The intent is settled `absent` (released)
/// while its job still runs, so the resolution leaves the put-back to the job; before
/// the job's failure write, another job with the same logical request (same key and
/// fingerprint) takes the released intent. The first design's failure write read an
/// intent no longer the job's own and left the job dead for good, although the call it
/// awaited was settled; now any settled state of the awaited key puts it back.
///
/// Replay: unknown → `resolve_intent(Absent)` (job running: no put-back) → a second job
/// begins the key (takes the released row, fence + 1, job_id = the second job) → the
/// first job fails awaiting the intent.
async fn a_job_whose_released_intent_another_job_took_is_not_dead_for_good(db: &TestDb) {
    let (idem, protocol, job, unknown) = running_with_unknown_intent(db).await;
    let (released, retried) = idem
        .resolve_intent(KEY, IntentResolution::Absent)
        .await
        .unwrap();
    assert_eq!(released.state, IntentState::Released);
    assert!(!retried, "the job still runs: the put-back is left to it");

    let other = idem
        .enqueue(Job::new("pay", json!({"order": 1, "again": true})).queue(QUEUE))
        .await
        .unwrap()
        .job
        .id;
    let other_claim = protocol.claim(claim_one()).await.unwrap().remove(0);
    assert_eq!(other_claim.id, other);
    let taken = begin(&idem, other_claim.lease_token()).await;
    assert!(matches!(taken, IntentBegun::Begun(_)), "{taken:?}");
    assert_eq!(intent_row(&idem).await.job_id, other);

    let written = protocol
        .fail(&job, awaiting_reconciliation(&unknown))
        .await
        .unwrap();
    let after = common::job(&idem, job.id).await;
    assert_ne!(
        after.state,
        JobState::Dead,
        "the job awaited an intent settled while it ended, and is dead for good: its \
         resolution saw it running, its failure write saw the intent taken by job \
         {other} (written {written:?})"
    );
}

/// Holds (both stores): a stale claim of the job (rescued and claimed again) cannot make
/// the fresh claim's job dead through `fail_awaiting`, nor put it back.
async fn a_stale_claim_awaiting_an_intent_writes_nothing(db: &TestDb) {
    let (idem, protocol, job, unknown) = running_with_unknown_intent(db).await;
    let clock = db_clock(db).await;
    clock.advance(Duration::from_secs(3600));
    let rescuer = client(db, Some(Arc::new(clock)));
    assert_eq!(rescuer.rescue().await.unwrap().len(), 1);
    let (settled, retried) = idem.resolve_intent(KEY, applied()).await.unwrap();
    assert_eq!(settled.state, IntentState::Completed);
    assert!(!retried, "the rescued job is retryable, not dead");
    // Claimed again on the rescuer's clock (the rescue scheduled it at that clock's now).
    let later = WorkerProtocol::new(rescuer.clone(), config(QUEUE, 1)).unwrap();
    let fresh = later.claim(claim_one()).await.unwrap().remove(0);
    assert_eq!(fresh.id, job.id);

    let stale = protocol.fail(&job, awaiting_reconciliation(&unknown)).await;
    assert!(stale.is_err(), "the stale claim wrote: {stale:?}");
    let after = common::job(&idem, job.id).await;
    assert_eq!((after.state, after.fence), (JobState::Running, fresh.fence));
}

/// Holds (PostgreSQL): an operator's retry of the dead job in flight while the
/// resolution runs; the resolution's put-back waits for it, finds the job no longer dead
/// and takes nothing: one put-back, not two.
async fn a_resolution_and_an_operator_retry_put_the_job_back_once(db: &TestDb) {
    let (idem, protocol, job, unknown) = running_with_unknown_intent(db).await;
    protocol
        .fail(&job, awaiting_reconciliation(&unknown))
        .await
        .unwrap();
    let mut operator = db.store.begin().await.unwrap();
    let retried = operator
        .job_retry(JobRetry {
            ids: vec![job.id],
            now: None,
        })
        .await
        .unwrap();
    assert_eq!(retried.len(), 1);

    let racer_idem = idem.clone();
    let racer = spawn_started(async move { racer_idem.resolve_intent(KEY, applied()).await }).await;
    assert_waits_for(db, &mut operator, &racer).await;
    operator.commit().await.unwrap();

    let (settled, put_back) = racer.await.unwrap().unwrap();
    assert_eq!(settled.state, IntentState::Completed);
    assert!(!put_back, "the operator's retry took the job already");
    assert_eq!(state_of(&idem, job.id).await, JobState::Available);
}

idem_store_tests::store_cases!(
    a_job_rescued_dead_after_its_intent_was_settled_stays_a_dead_letter,
    a_job_rescued_dead_before_its_intent_is_settled_stays_a_dead_letter,
    a_resolution_never_resurrects_a_job_dead_for_another_reason,
    a_job_whose_released_intent_another_job_took_is_not_dead_for_good,
    a_stale_claim_awaiting_an_intent_writes_nothing,
);

idem_store_tests::postgres_cases!(
    a_resolution_never_uncancels_a_job_cancelled_after_it_read_it_dead,
    a_resolution_and_an_operator_retry_put_the_job_back_once,
);
