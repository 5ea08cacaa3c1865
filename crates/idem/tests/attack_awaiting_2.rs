//! Second attack on the put-back of a job awaiting an intent (commit 9e7bcfb): a job
//! written dead when its call's outcome is unknown records the key it awaits
//! (`idem_job.awaits_intent`); the failure write (`fail_awaiting`) or the resolution
//! (`Idem::settle_intent`), whichever writes last, puts it back in its own transaction.
//!
//! The cases of `attack_awaiting.rs` and `awaiting_intent.rs` are not repeated. Each case
//! here says whether it found a defect (it failed on 9e7bcfb, and is fixed) or held. Races are replayed
//! on PostgreSQL: one transaction holds its row lock until the other's statement waits
//! for it.

mod common;

use std::time::Duration;

use common::awaiting::*;
use common::*;
use idem::intent::awaiting_reconciliation;
use idem::{
    Batch, Idem, IntentResolution, IntentState, Job, JobRow, JobState, PurgeTarget, WorkerProtocol,
};
use idem_store::{IntentBegun, JobFail};
use idem_store_tests::TestDb;
use idem_store_tests::fixture::{assert_waits_for, pg_wait_until_n_blocked_by, spawn_started};
use serde_json::json;

/// Found by the attack (both stores), fixed by 4c04b01. The dead-job purge
/// (`purge/jobs.sql`) kept a dead job only
/// when an intent *whose `job_id` is that job* is in progress, unknown or manual. A job
/// that stopped to await an intent held by another job (two jobs with one logical
/// request: the second one's begin met the first one's `unknown` intent, and its
/// handler failed with `awaiting_reconciliation`, which is what `Intent::wait` tells it
/// to do) is not protected: its `awaits_intent` is ignored. An intent parked `manual`
/// waits for an operator for as long as it takes; once the dead-job retention (7 days
/// by default) passes, the purger deletes the second job while its intent is still
/// awaited, and the operator's resolution later puts back only the first. The second
/// job vanishes without ever having been a dead letter for anyone to look at.
///
/// Replay: job A holds the key and marks it unknown, fails awaiting it (dead); job B
/// begins the same key (Reconcile) and fails awaiting it (dead). The reconciler parks the
/// intent `manual`. A dead-job purge runs with a cutoff past both jobs' finalization
/// (their retention passed). The operator settles the intent.
async fn a_dead_job_purge_keeps_a_job_awaiting_another_jobs_intent(db: &TestDb) {
    let (idem, _protocol, a, b) = two_awaiting_a_parked_intent(db).await;

    // The dead-job retention passes while the intent waits for an operator.
    let past_retention = db.store.now().await.unwrap() + chrono::Duration::hours(1);
    let purged = idem
        .purge_before(PurgeTarget::DeadJobs, past_retention, 100, |_| {})
        .await
        .unwrap();

    let (settled, _) = idem.resolve_intent(KEY, applied()).await.unwrap();
    assert_eq!(settled.state, IntentState::Completed);
    assert_eq!(state_of(&idem, a.id).await, JobState::Available);
    let b_now = idem.job(b.id).await.unwrap();
    assert_eq!(
        b_now.map(|j| j.state),
        Some(JobState::Available),
        "job {} awaited intent {KEY:?} (held by job {}) and was deleted by the dead-job \
         purge ({purged} job(s) purged) while the intent was parked for an operator: the \
         operator's resolution had nothing left to put back",
        b.id,
        a.id
    );
}

/// Found by the attack (both stores), fixed. A child of a sealed batch whose failure
/// write finds its intent
/// settled meanwhile is written dead and put back in the same transaction
/// (`fail_awaiting`): `job_fail` counts the child dead, and being the batch's last
/// unfinished child, finishes the batch and enqueues its successor (the `on_dead`
/// failure successor, since a child "died"); the put-back then takes the child's dead
/// count back but the batch stays `finished` with its successor enqueued. No committed
/// state ever showed the child dead: it went from running to available, and it will run
/// again (and may complete), yet the batch's fan-in already ran, as a failure, before
/// its child finished. "The last child to finish enqueues the successor" is broken.
///
/// Replay: a sealed batch of one `pay` child with a failure successor; the child holds
/// the key and marks it unknown; the operator settles the intent while the child still
/// runs (nothing to put back); the child fails awaiting the intent (its write finds it
/// settled and puts the child back).
async fn a_batch_child_put_back_by_its_own_failure_write_does_not_finish_its_batch(db: &TestDb) {
    let idem = client(db, None);
    let protocol = WorkerProtocol::new(idem.clone(), config(QUEUE, 1)).unwrap();
    let batch = Batch::new(Job::new("merge", json!({})).queue("merge"))
        .on_dead(Job::new("merge-failed", json!({})).queue("merge"))
        .child(Job::new("pay", json!({"order": 1})).queue(QUEUE));
    let created = idem.batch(batch).await.unwrap();
    let batch_id = created.batch.id;
    let job = protocol.claim(claim_one()).await.unwrap().remove(0);
    assert_eq!(job.batch_id, Some(batch_id));
    let IntentBegun::Begun(held) = begin(&idem, job.lease_token()).await else {
        panic!("a new key is begun");
    };
    let unknown = mark_unknown(&idem, &held).await;
    let (settled, back) = idem.resolve_intent(KEY, applied()).await.unwrap();
    assert_eq!((settled.state, back), (IntentState::Completed, false));

    let written = protocol
        .fail(&job, awaiting_reconciliation(&unknown))
        .await
        .unwrap();
    assert_eq!(written.state, JobState::Available, "put back: {written:?}");

    let row = idem.batch_get(batch_id).await.unwrap().expect("the batch");
    assert_eq!(
        (row.successor_job_id, row.dead, row.finished_children()),
        (None, 0, 0),
        "the batch's only child is available again (it never was dead in any committed \
         state), yet the batch finished and enqueued its successor: {row:?}"
    );
}

/// Found by the attack (PostgreSQL; replayed on both stores), fixed: a deadlock between a resolution and a
/// sibling's dead write. The two writers took their locks in opposite orders once
/// batches were involved: the failure write of a batch child took its job row, then (its
/// shard finishing) the batch row, then the intent (`intent_lock`, FOR SHARE); a
/// resolution takes the intent, then the dead jobs awaiting it (`put_back.sql`), then,
/// reopening a child's batch count, the batch row. Two children of one batch awaiting
/// one key closed the cycle and PostgreSQL aborted the resolution ("deadlock
/// detected"). Now the failure write (`StoreTx::job_fail_awaiting`) takes the job row,
/// the intent, and only then the batch row, and both orders end without a deadlock.
///
/// Replay: a batch of three `pay` children X, Y, Z; X holds the key and marks it
/// unknown; Y begins the key (Reconcile) and fails awaiting it (dead). First order: X's
/// failure write runs in an open transaction (it holds the intent's share lock and the
/// batch row), the operator's resolution waits for it, X commits; the other order is the
/// next case.
async fn a_resolution_waits_for_a_sibling_dead_write_without_deadlock(db: &TestDb) {
    let idem = client(db, None);
    let protocol = WorkerProtocol::new(idem.clone(), config(QUEUE, 1)).unwrap();
    let (x, y, batch_id) = siblings_awaiting(&idem, &protocol).await;
    let mut dying = db.store.begin().await.unwrap();
    let (written, awaited) = dying
        .job_fail_awaiting(fail_of(&x), KEY.into())
        .await
        .unwrap();
    assert_eq!(
        (written.state, awaited),
        (JobState::Dead, idem_store::Awaited::Waits)
    );
    let racer_idem = idem.clone();
    let racer = spawn_started(async move { racer_idem.resolve_intent(KEY, applied()).await }).await;
    assert_waits_for(db, &mut dying, &racer).await;
    dying.commit().await.unwrap();
    let resolved = tokio::time::timeout(Duration::from_secs(30), racer)
        .await
        .expect("the resolution ended")
        .unwrap();
    assert!(resolved.is_ok(), "the resolution failed: {resolved:?}");
    for id in [x.id, y.id] {
        assert_eq!(common::job(&idem, id).await.state, JobState::Available);
    }
    let batch = idem.batch_get(batch_id).await.unwrap().expect("the batch");
    assert_eq!((batch.dead, batch.finished_children()), (0, 0), "{batch:?}");
}

/// [`a_resolution_waits_for_a_sibling_dead_write_without_deadlock`] in the other order:
/// the resolution runs in an open transaction (it holds the intent, Y and the batch
/// row), X's failure write waits for it, the resolution commits, X is put back by its
/// own write.
async fn a_sibling_dead_write_waits_for_a_resolution_without_deadlock(db: &TestDb) {
    let idem = client(db, None);
    let protocol = WorkerProtocol::new(idem.clone(), config(QUEUE, 1)).unwrap();
    let (x, y, batch_id) = siblings_awaiting(&idem, &protocol).await;
    let unknown = idem.intent(KEY).await.unwrap().expect("the intent");
    let mut resolving = db.store.begin().await.unwrap();
    let resolve = idem_store::IntentResolve {
        token: unknown.token(),
        from: vec![IntentState::Unknown],
        resolution: applied(),
        now: None,
    };
    resolving.intent_resolve(resolve).await.unwrap();
    let put_back = idem_store::JobPutBack {
        key: KEY.into(),
        now: None,
    };
    let back = resolving.job_put_back(put_back).await.unwrap();
    assert_eq!(back.len(), 1, "Y is put back");
    let racer_protocol = protocol.clone();
    let (racer_x, error) = (x.clone(), awaiting_reconciliation(&unknown));
    let racer = spawn_started(async move { racer_protocol.fail(&racer_x, error).await }).await;
    assert_waits_for(db, &mut resolving, &racer).await;
    resolving.commit().await.unwrap();
    let written = racer.await.unwrap().unwrap();
    assert_eq!(written.state, JobState::Available, "X sees the resolution");
    assert_eq!(common::job(&idem, y.id).await.state, JobState::Available);
    let batch = idem.batch_get(batch_id).await.unwrap().expect("the batch");
    assert_eq!((batch.dead, batch.finished_children()), (0, 0), "{batch:?}");
}

/// The failure of `job`'s claim that makes it dead (no retry).
fn fail_of(job: &JobRow) -> JobFail {
    JobFail {
        lease: job.lease_token(),
        error: "awaits its intent".into(),
        retry_in_ms: None,
        snooze: false,
        now: None,
    }
}

/// A batch of three `pay` children: X holds intent [`KEY`] and marked it unknown (still
/// running), Y met it and stopped, dead, to await it. Returns X, Y and the batch.
async fn siblings_awaiting(idem: &Idem, protocol: &WorkerProtocol) -> (JobRow, JobRow, i64) {
    let children = (0..3).map(|c| Job::new("pay", json!({"order": 1, "n": c})).queue(QUEUE));
    let batch = Batch::new(Job::new("merge", json!({})).queue("merge")).children(children);
    let batch_id = idem.batch(batch).await.unwrap().batch.id;
    let x = protocol.claim(claim_one()).await.unwrap().remove(0);
    let y = protocol.claim(claim_one()).await.unwrap().remove(0);
    assert_eq!((x.batch_id, y.batch_id), (Some(batch_id), Some(batch_id)));
    let IntentBegun::Begun(held) = begin(idem, x.lease_token()).await else {
        panic!("a new key is begun");
    };
    mark_unknown(idem, &held).await;
    let IntentBegun::Reconcile(row) = begin(idem, y.lease_token()).await else {
        panic!("the sibling meets the unknown intent");
    };
    let dead = protocol
        .fail(&y, awaiting_reconciliation(&row))
        .await
        .unwrap();
    assert_eq!(dead.state, JobState::Dead);
    (x, y, batch_id)
}

/// Held (both stores): several jobs awaiting one key (one logical request) are all put
/// back by the resolution of that key, also when the key is held by only one of them,
/// and the reconciler counts each.
async fn every_job_awaiting_one_key_is_put_back_by_its_resolution(db: &TestDb) {
    let (idem, protocol, a, _) = dead_awaiting_unknown_intent(db).await;
    let b = second_job_awaiting(&idem, &protocol).await;
    let (settled, back) = idem
        .resolve_intent(KEY, IntentResolution::Absent)
        .await
        .unwrap();
    assert_eq!((settled.state, back), (IntentState::Released, true));
    assert_eq!(state_of(&idem, a.id).await, JobState::Available);
    assert_eq!(state_of(&idem, b.id).await, JobState::Available);
}

/// Held (both stores): a dead job awaiting a key is not put back by the failure write of
/// another job awaiting the same key while the intent is still unknown, and both are put
/// back by the later resolution from `manual`.
async fn an_operator_resolution_from_manual_puts_back_every_awaiting_job(db: &TestDb) {
    let (idem, protocol, a, _) = dead_awaiting_unknown_intent(db).await;
    let manual = IntentResolution::Manual {
        error: "cannot tell".into(),
    };
    idem.resolve_intent(KEY, manual).await.unwrap();
    let b = second_job_awaiting(&idem, &protocol).await;
    assert_eq!(state_of(&idem, a.id).await, JobState::Dead);
    let (settled, back) = idem.resolve_intent(KEY, applied()).await.unwrap();
    assert_eq!((settled.state, back), (IntentState::Completed, true));
    assert_eq!(state_of(&idem, a.id).await, JobState::Available);
    assert_eq!(state_of(&idem, b.id).await, JobState::Available);
}

/// Held (PostgreSQL): two jobs awaiting one key end their attempts while a resolution is
/// in flight; each failure write waits for the resolution's intent lock, finds the key
/// settled and puts its own job back; neither deadlocks with the other, nor with the
/// resolution (no batches).
async fn two_dead_writes_wait_for_one_resolution_and_both_are_put_back(db: &TestDb) {
    let (idem, protocol, a, unknown) = running_with_unknown_intent(db).await;
    let (b, row) = second_job_meeting(&idem, &protocol).await;

    let mut resolver = db.store.begin().await.unwrap();
    let resolve = idem_store::IntentResolve {
        token: unknown.token(),
        from: idem::intent::OPERATOR_FROM.to_vec(),
        resolution: applied(),
        now: None,
    };
    resolver.intent_resolve(resolve).await.unwrap();

    let (pa, pb) = (protocol.clone(), protocol.clone());
    let (ja, ea) = (a.clone(), awaiting_reconciliation(&unknown));
    let racer_a = spawn_started(async move { pa.fail(&ja, ea).await }).await;
    assert_waits_for(db, &mut resolver, &racer_a).await;
    let (jb, eb) = (b.clone(), awaiting_reconciliation(&row));
    let racer_b = spawn_started(async move { pb.fail(&jb, eb).await }).await;
    let both = pg_wait_until_n_blocked_by(db, &mut resolver, 2);
    idem_store_tests::harness::within(30, "both dead writes wait", both).await;
    resolver.commit().await.unwrap();

    let wa = racer_a.await.unwrap().unwrap();
    let wb = racer_b.await.unwrap().unwrap();
    assert_eq!(
        (wa.state, wb.state),
        (JobState::Available, JobState::Available)
    );
}

idem_store_tests::store_cases!(
    a_dead_job_purge_keeps_a_job_awaiting_another_jobs_intent,
    a_batch_child_put_back_by_its_own_failure_write_does_not_finish_its_batch,
    every_job_awaiting_one_key_is_put_back_by_its_resolution,
    an_operator_resolution_from_manual_puts_back_every_awaiting_job,
    a_resolution_waits_for_a_sibling_dead_write_without_deadlock,
    a_sibling_dead_write_waits_for_a_resolution_without_deadlock,
);

idem_store_tests::postgres_cases!(two_dead_writes_wait_for_one_resolution_and_both_are_put_back,);
