//! Intents: `intent_begin` reserves a key in one conditional write fenced by the job's
//! claim. A new key is `Begun` (fence 1, attempt 1); a key whose holder's lease is live
//! (`lease_expires_at >= now`) is `InProgress`; an expired keyed one is taken over
//! (attempt + 1, fence + 1, a new lease) and an expired unkeyed one goes to `unknown`
//! without a lease; every other state answers what it holds, and another fingerprint is
//! a `Mismatch`, none of them changing the row. A holder's renewals and outcome carry the
//! intent's fence (`IntentLost` otherwise, nothing written), reconciliation resolves only
//! from the state and fence it read, and the purge takes only finished intents of jobs
//! that cannot run again. The races are in [`super::intent_race`].

use idem_store::{
    IntentBegin, IntentBegun, IntentCount, IntentFinish, IntentList, IntentOutcome, IntentRenew,
    IntentResolution, IntentResolve, IntentRow, IntentState, IntentToken, JobLock, JobRow,
    LeaseToken, Purge, PurgeTarget, StoreError, StoreResult, Timestamp,
};
use serde_json::json;

use crate::TestDb;
use crate::fixture::{
    assert_lease_lost, at, cancel, complete, fail, insert_one, job_in, reclaimed, running, t0,
};

/// The fingerprint of every request the cases make, unless they test a mismatch.
pub(crate) const FP: &str = "fp-1";
/// The lease an intent's holder takes, in milliseconds.
pub(crate) const INTENT_LEASE_MS: i64 = 10_000;
/// When the lease of an intent begun at `at(1_000)` ends.
pub(crate) const ENDS: i64 = 1_000 + INTENT_LEASE_MS;
/// What reconciliation may resolve from in most cases.
const OPEN: [IntentState; 2] = [IntentState::Unknown, IntentState::Manual];

/// A job of its own `queue`, running under its first claim since [`t0`].
pub(crate) async fn claimed(db: &TestDb, queue: &str) -> JobRow {
    running(db, job_in(queue, "charge"), t0()).await
}

/// The params of a begin of `key` by the claim `job` at `now`.
pub(crate) fn begin_params(
    key: &str,
    fingerprint: &str,
    unkeyed: bool,
    lease_ms: i64,
    job: LeaseToken,
    now: Timestamp,
) -> IntentBegin {
    IntentBegin {
        key: key.to_owned(),
        fingerprint: fingerprint.to_owned(),
        unkeyed,
        lease_ms,
        job,
        now: Some(now),
    }
}

/// The params of a keyed begin of `key` with [`FP`] and [`INTENT_LEASE_MS`] by `job`'s
/// claim at `at(ms)`.
pub(crate) fn keyed(key: &str, job: &JobRow, ms: i64) -> IntentBegin {
    begin_params(key, FP, false, INTENT_LEASE_MS, job.lease_token(), at(ms))
}

/// Begins [`keyed`] `key` in its own transaction.
pub(crate) async fn begin(db: &TestDb, key: &str, job: &JobRow, ms: i64) -> IntentBegun {
    let params = keyed(key, job, ms);
    db.store.intent_begin(params).await.expect("intent_begin")
}

/// The row of a `Begun` answer; panics on any other.
#[track_caller]
pub(crate) fn begun(answer: IntentBegun) -> IntentRow {
    match answer {
        IntentBegun::Begun(row) => row,
        other => panic!("expected Begun, got {other:?}"),
    }
}

/// The row a first begin of [`keyed`] `key` by `job` at `at(ms)` writes.
pub(crate) fn fresh(key: &str, job: &JobRow, ms: i64) -> IntentRow {
    IntentRow {
        key: key.to_owned(),
        state: IntentState::InProgress,
        fingerprint: FP.to_owned(),
        unkeyed: false,
        fence: 1,
        attempt: 1,
        lease_expires_at: Some(at(ms + INTENT_LEASE_MS)),
        job_id: job.id,
        job_fence: job.fence,
        result: None,
        error: None,
        remote_refs: vec![],
        created_at: at(ms),
        updated_at: at(ms),
    }
}

/// The row a begin by `job` at `at(ms)` writes when it takes the keyed intent `was`
/// (released, or lapsed): in progress again, attempt and fence moved on.
pub(crate) fn taken(key: &str, was: &IntentRow, job: &JobRow, ms: i64) -> IntentRow {
    IntentRow {
        state: IntentState::InProgress,
        fence: was.fence + 1,
        attempt: was.attempt + 1,
        lease_expires_at: Some(at(ms + INTENT_LEASE_MS)),
        job_id: job.id,
        job_fence: job.fence,
        updated_at: at(ms),
        created_at: was.created_at,
        ..fresh(key, job, ms)
    }
}

/// The intent as stored now.
pub(crate) async fn stored(db: &TestDb, key: &str) -> Option<IntentRow> {
    db.store
        .intent_get(key.to_owned())
        .await
        .expect("intent_get")
}

/// Renews the holder `token` for `lease_ms` at `at(ms)`.
async fn renew(db: &TestDb, token: IntentToken, lease_ms: i64, ms: i64) -> StoreResult<IntentRow> {
    let params = IntentRenew {
        token,
        lease_ms,
        now: Some(at(ms)),
    };
    db.store.intent_renew(params).await
}

/// Records `outcome` for the holder `token` at `at(ms)`.
pub(crate) async fn finish(
    db: &TestDb,
    token: IntentToken,
    outcome: IntentOutcome,
    ms: i64,
) -> StoreResult<IntentRow> {
    let params = IntentFinish {
        token,
        outcome,
        now: Some(at(ms)),
    };
    db.store.intent_finish(params).await
}

/// Resolves the intent read as `token` from `from` at `at(ms)`.
async fn resolve(
    db: &TestDb,
    token: IntentToken,
    from: &[IntentState],
    resolution: IntentResolution,
    ms: i64,
) -> StoreResult<IntentRow> {
    let params = IntentResolve {
        token,
        from: from.to_vec(),
        resolution,
        now: Some(at(ms)),
    };
    db.store.intent_resolve(params).await
}

/// The outcome of a call applied once, with a result and a remote id named after `key`.
pub(crate) fn applied(key: &str) -> IntentOutcome {
    IntentOutcome::Completed {
        result: json!({ "charge": key, "amount": 1200 }),
        remote_refs: vec![format!("ch_{key}")],
    }
}

/// Begins `params` and brings the intent to `state` at `at(ms)`: finished (completed,
/// failed, unknown, released) by its holder, or resolved from `unknown` (duplicate, manual).
async fn intent_in(db: &TestDb, params: IntentBegin, state: IntentState, ms: i64) -> IntentRow {
    let key = params.key.clone();
    let held = begun(db.store.intent_begin(params).await.expect("intent_begin"));
    let outcome = match state {
        IntentState::InProgress => return held,
        IntentState::Completed => applied(&key),
        IntentState::Failed => IntentOutcome::Failed {
            error: "card declined".into(),
        },
        IntentState::Released => IntentOutcome::Released,
        _ => IntentOutcome::Unknown {
            error: "timed out".into(),
        },
    };
    let row = finish(db, held.token(), outcome, ms).await.expect("finish");
    let resolution = match state {
        IntentState::Duplicate => IntentResolution::Duplicate {
            remote_refs: vec![format!("ch_{key}_1"), format!("ch_{key}_2")],
        },
        IntentState::Manual => IntentResolution::Manual {
            error: "the remote cannot tell".into(),
        },
        _ => return row,
    };
    let row = resolve(db, row.token(), &OPEN, resolution, ms).await;
    row.expect("resolve")
}

/// [`intent_in`] for a [`keyed`] begin of `key` by `job` at `at(ms)`.
async fn intent_at(db: &TestDb, key: &str, state: IntentState, job: &JobRow, ms: i64) -> IntentRow {
    intent_in(db, keyed(key, job, ms), state, ms).await
}

/// Asserts that `result` is [`StoreError::IntentLost`] for `token`.
#[track_caller]
pub(crate) fn assert_intent_lost<T: std::fmt::Debug>(result: StoreResult<T>, token: &IntentToken) {
    match result {
        Err(StoreError::IntentLost { key, fence }) => {
            assert_eq!(
                (&key, fence),
                (&token.key, token.fence),
                "IntentLost names it"
            );
        }
        other => panic!("expected IntentLost for {token:?}, got {other:?}"),
    }
}

/// Asserts that `result` is [`StoreError::Conflict`].
#[track_caller]
fn assert_conflict<T: std::fmt::Debug>(result: StoreResult<T>, what: &str) {
    assert!(
        matches!(result, Err(StoreError::Conflict(_))),
        "{what}: expected Conflict, got {result:?}"
    );
}

/// A begin of a new key by a current claim reserves it: `Begun`, in progress, fence 1,
/// attempt 1, a lease to `now + lease_ms`, the claim's job and fence, created and
/// changed `now`; the row is stored as returned.
pub async fn intent_begin_reserves_a_new_key(db: &TestDb) {
    let job = claimed(db, "q-1").await;
    let row = begun(begin(db, "pay:order-7", &job, 1_000).await);
    assert_eq!(row, fresh("pay:order-7", &job, 1_000));
    assert_eq!(stored(db, "pay:order-7").await, Some(row));
    let params = begin_params("sms:1", FP, true, 2_500, job.lease_token(), at(2_000));
    let unkeyed = begun(db.store.intent_begin(params).await.expect("intent_begin"));
    let expected = IntentRow {
        key: "sms:1".into(),
        unkeyed: true,
        lease_expires_at: Some(at(4_500)),
        ..fresh("sms:1", &job, 2_000)
    };
    assert_eq!(unkeyed, expected);
}

/// A begin by a claim that is not current — a stale fence of a reclaimed job, a job
/// completed, cancelled, never claimed or missing — is `LeaseLost` and writes nothing;
/// nor can a stale claim take over an intent whose lease has ended.
pub async fn intent_begin_refuses_a_claim_not_current(db: &TestDb) {
    let current = reclaimed(db, job_in("q-r", "charge"), t0()).await;
    let done = claimed(db, "q-d").await;
    complete(db, done.lease_token(), at(1))
        .await
        .expect("complete");
    let cancelled = claimed(db, "q-c").await;
    cancel(db, cancelled.id, at(1)).await.expect("cancel");
    let waiting = insert_one(db, job_in("q-w", "charge"), t0()).await;
    let stale = LeaseToken {
        fence: current.fence - 1,
        ..current.lease_token()
    };
    let missing = LeaseToken {
        job_id: waiting.id + 1_000,
        fence: 1,
    };
    let refused = [
        stale,
        done.lease_token(),
        cancelled.lease_token(),
        waiting.lease_token(),
        missing,
    ];
    for (i, lease) in refused.into_iter().enumerate() {
        let key = format!("new:{i}");
        let params = begin_params(&key, FP, false, INTENT_LEASE_MS, lease, at(1_000));
        assert_lease_lost(db.store.intent_begin(params).await, lease);
        assert_eq!(
            stored(db, &key).await,
            None,
            "nothing written for {lease:?}"
        );
    }
    let held = begun(begin(db, "lapsed", &current, 1_000).await);
    let params = begin_params("lapsed", FP, false, INTENT_LEASE_MS, stale, at(ENDS + 1));
    assert_lease_lost(db.store.intent_begin(params).await, stale);
    assert_eq!(stored(db, "lapsed").await, Some(held));
}

/// While the holder's lease is live — up to and including its last instant
/// (`lease_expires_at >= now`, the comparison the job rescue uses) — a begin of the key,
/// by any claim, is `InProgress` with the holder's row, unchanged. One millisecond later
/// a keyed intent is taken over: `Begun` with attempt 2, fence 2, a new lease and the
/// new claim's job; it keeps its creation time.
pub async fn intent_begin_answers_in_progress_until_the_lease_has_ended(db: &TestDb) {
    let first = claimed(db, "q-1").await;
    let second = claimed(db, "q-2").await;
    let held = begun(begin(db, "pay:1", &first, 1_000).await);
    let tries = [(&first, 2_000), (&second, ENDS - 1), (&second, ENDS)];
    for (job, ms) in tries {
        let answer = begin(db, "pay:1", job, ms).await;
        let lag = ms - ENDS;
        assert_eq!(answer, IntentBegun::InProgress(held.clone()), "at {lag} ms");
    }
    assert_eq!(stored(db, "pay:1").await, Some(held));
    let taken = begun(begin(db, "pay:1", &second, ENDS + 1).await);
    let expected = IntentRow {
        fence: 2,
        attempt: 2,
        lease_expires_at: Some(at(ENDS + 1 + INTENT_LEASE_MS)),
        updated_at: at(ENDS + 1),
        ..fresh("pay:1", &second, 1_000)
    };
    assert_eq!(taken, expected);
    assert_eq!(stored(db, "pay:1").await, Some(expected));
}

/// An unkeyed intent (the remote ignores keys) whose holder's lease has ended is never
/// handed to a new holder, since the call may have been sent: the begin answers
/// `Reconcile` with the intent now `unknown`, fence + 1, the same attempt, no lease and
/// an error saying so. Later begins answer the same and change nothing.
pub async fn intent_begin_of_a_lapsed_unkeyed_intent_reconciles(db: &TestDb) {
    let first = claimed(db, "q-1").await;
    let second = claimed(db, "q-2").await;
    let params = |job: &JobRow, ms| {
        begin_params(
            "sms:1",
            FP,
            true,
            INTENT_LEASE_MS,
            job.lease_token(),
            at(ms),
        )
    };
    let try_begin =
        |p: IntentBegin| async move { db.store.intent_begin(p).await.expect("intent_begin") };
    let held = begun(try_begin(params(&first, 1_000)).await);
    let live = try_begin(params(&second, ENDS)).await;
    assert_eq!(live, IntentBegun::InProgress(held.clone()));
    let row = match try_begin(params(&second, ENDS + 1)).await {
        IntentBegun::Reconcile(row) => row,
        other => panic!("a lapsed unkeyed intent must go to reconciliation: {other:?}"),
    };
    let got = (row.state, row.fence, row.attempt, row.lease_expires_at);
    assert_eq!(got, (IntentState::Unknown, 2, 1, None));
    let kept = (&row.key, &row.fingerprint, row.unkeyed, row.created_at);
    assert_eq!(kept, (&held.key, &held.fingerprint, true, at(1_000)));
    assert_eq!((row.updated_at, &row.result), (at(ENDS + 1), &None));
    let error = row.error.clone().unwrap_or_default();
    assert!(error.contains("sent"), "the error says why: {error:?}");
    assert_eq!(stored(db, "sms:1").await, Some(row.clone()));
    let later = try_begin(params(&second, ENDS + 60_000)).await;
    assert_eq!(later, IntentBegun::Reconcile(row.clone()), "no new lease");
    assert_eq!(stored(db, "sms:1").await, Some(row));
}

/// A begin with another fingerprint than the stored one is a `Mismatch` with the stored
/// row, whatever its state — also an `in_progress` one whose lease has ended, keyed or
/// unkeyed, which it does not take over — and the row is unchanged.
pub async fn intent_begin_with_another_fingerprint_is_a_mismatch(db: &TestDb) {
    let holder = claimed(db, "q-1").await;
    let other = claimed(db, "q-2").await;
    let mut rows = Vec::new();
    for state in IntentState::ALL {
        rows.push(intent_at(db, &format!("mm:{state}"), state, &holder, 1_000).await);
    }
    let lease = holder.lease_token();
    let params = begin_params("mm:unkeyed", FP, true, INTENT_LEASE_MS, lease, at(1_000));
    rows.push(intent_in(db, params, IntentState::InProgress, 1_000).await);
    for ms in [2_000, ENDS + 1] {
        for row in &rows {
            let lease = other.lease_token();
            let p = begin_params(
                &row.key,
                "fp-2",
                row.unkeyed,
                INTENT_LEASE_MS,
                lease,
                at(ms),
            );
            let answer = db.store.intent_begin(p).await.expect("intent_begin");
            assert_eq!(answer, IntentBegun::Mismatch(row.clone()), "at {ms} ms");
            assert_eq!(stored(db, &row.key).await.as_ref(), Some(row), "unchanged");
        }
    }
}

/// A begin of an intent that left `in_progress` answers its outcome and changes nothing:
/// `completed` and `duplicate` are `Completed` with the stored result and remote ids,
/// `failed` is `Failed`, `unknown` and `manual` are `Reconcile` — however long after.
pub async fn intent_begin_of_a_finished_intent_answers_its_outcome(db: &TestDb) {
    let holder = claimed(db, "q-1").await;
    let other = claimed(db, "q-2").await;
    let finished = [
        IntentState::Completed,
        IntentState::Duplicate,
        IntentState::Failed,
        IntentState::Unknown,
        IntentState::Manual,
    ];
    for state in finished {
        let key = format!("done:{state}");
        let row = intent_at(db, &key, state, &holder, 1_000).await;
        assert_eq!(row.lease_expires_at, None, "{state} holds no lease");
        let expected = match state {
            IntentState::Completed | IntentState::Duplicate => IntentBegun::Completed(row.clone()),
            IntentState::Failed => IntentBegun::Failed(row.clone()),
            _ => IntentBegun::Reconcile(row.clone()),
        };
        for ms in [2_000, 3_600_000] {
            assert_eq!(begin(db, &key, &other, ms).await, expected, "{state}");
        }
        assert_eq!(stored(db, &key).await, Some(row));
    }
    let done = stored(db, "done:completed").await.expect("completed");
    let result = json!({ "charge": "done:completed", "amount": 1200 });
    assert_eq!(done.result, Some(result), "the stored result");
    assert_eq!(done.remote_refs, ["ch_done:completed"]);
}

/// A renewal under the intent's fence while its lease is live (up to its last instant)
/// extends the lease to `now + lease_ms` and changes nothing else; a begin by another
/// claim inside the renewed lease is `InProgress`.
pub async fn intent_renew_extends_a_live_lease(db: &TestDb) {
    let job = claimed(db, "q-1").await;
    let other = claimed(db, "q-2").await;
    let held = begun(begin(db, "pay:1", &job, 1_000).await);
    let renewed = renew(db, held.token(), 20_000, 5_000).await.expect("renew");
    let expected = IntentRow {
        lease_expires_at: Some(at(25_000)),
        updated_at: at(5_000),
        ..held.clone()
    };
    assert_eq!(renewed, expected);
    assert_eq!(stored(db, "pay:1").await, Some(expected));
    let edge = renew(db, held.token(), 20_000, 25_000).await;
    let edge = edge.expect("renewal at the lease's last instant");
    assert_eq!(edge.lease_expires_at, Some(at(45_000)));
    let answer = begin(db, "pay:1", &other, 45_000).await;
    assert_eq!(
        answer,
        IntentBegun::InProgress(edge),
        "the renewed lease holds"
    );
}

/// A renewal is `IntentLost`, and changes nothing, once the lease has ended (even
/// before anyone took the intent over), under a fence a takeover moved on, and after
/// the holder recorded its outcome or released the intent.
pub async fn intent_renew_refuses_a_lapsed_or_lost_holder(db: &TestDb) {
    let job = claimed(db, "q-1").await;
    let other = claimed(db, "q-2").await;
    let lapsed = begun(begin(db, "lapsed", &job, 1_000).await);
    let late = renew(db, lapsed.token(), INTENT_LEASE_MS, ENDS + 1).await;
    assert_intent_lost(late, &lapsed.token());
    assert_eq!(stored(db, "lapsed").await, Some(lapsed));
    let first = begun(begin(db, "taken", &job, 1_000).await);
    let second = begun(begin(db, "taken", &other, ENDS + 1).await);
    let zombie = renew(db, first.token(), INTENT_LEASE_MS, ENDS + 2).await;
    assert_intent_lost(zombie, &first.token());
    assert_eq!(stored(db, "taken").await, Some(second));
    let held = begun(begin(db, "done", &job, 1_000).await);
    let done = finish(db, held.token(), applied("done"), 2_000).await;
    let done = done.expect("finish");
    assert_intent_lost(renew(db, held.token(), 1, 3_000).await, &held.token());
    assert_eq!(stored(db, "done").await, Some(done));
    let held = begun(begin(db, "released", &job, 1_000).await);
    let released = finish(db, held.token(), IntentOutcome::Released, 2_000).await;
    let released = released.expect("release");
    assert_eq!(released.state, IntentState::Released);
    assert_intent_lost(renew(db, held.token(), 1, 3_000).await, &held.token());
    assert_eq!(stored(db, "released").await, Some(released));
}

/// The holder's outcome is recorded under its fence: `Completed` stores the result (a
/// JSON `null` too) and the remote's ids, `Failed` and `Unknown` their error; each leaves
/// `in_progress` with no lease, the same fence and attempt, changed `now`.
pub async fn intent_finish_records_each_outcome(db: &TestDb) {
    let job = claimed(db, "q-1").await;
    let outcomes = [
        ("pay:ok", applied("pay:ok")),
        (
            "pay:empty",
            IntentOutcome::Completed {
                result: serde_json::Value::Null,
                remote_refs: vec![],
            },
        ),
        (
            "pay:no",
            IntentOutcome::Failed {
                error: "card declined".into(),
            },
        ),
        (
            "pay:what",
            IntentOutcome::Unknown {
                error: "timed out after 30 s".into(),
            },
        ),
    ];
    for (key, outcome) in outcomes {
        let held = begun(begin(db, key, &job, 1_000).await);
        let row = finish(db, held.token(), outcome.clone(), 2_000).await;
        let base = IntentRow {
            lease_expires_at: None,
            updated_at: at(2_000),
            ..held
        };
        let expected = match outcome {
            IntentOutcome::Completed {
                result,
                remote_refs,
            } => IntentRow {
                state: IntentState::Completed,
                result: Some(result),
                remote_refs,
                ..base
            },
            IntentOutcome::Failed { error } => IntentRow {
                state: IntentState::Failed,
                error: Some(error),
                ..base
            },
            IntentOutcome::Unknown { error } => IntentRow {
                state: IntentState::Unknown,
                error: Some(error),
                ..base
            },
            IntentOutcome::Released => unreachable!("not among the outcomes"),
        };
        assert_eq!(row.expect("finish"), expected.clone(), "{key}");
        assert_eq!(stored(db, key).await, Some(expected), "{key}");
    }
}

/// Intents are counted per state, states without intents left out (the metrics' gauge).
pub async fn intent_counts_by_state(db: &TestDb) {
    assert_eq!(db.store.intent_counts().await.expect("counts"), vec![]);
    let job = claimed(db, "q-1").await;
    let outcomes = [
        ("c:1", applied("c:1")),
        ("c:2", applied("c:2")),
        (
            "c:3",
            IntentOutcome::Unknown {
                error: "timed out".into(),
            },
        ),
    ];
    for (key, outcome) in outcomes {
        let held = begun(begin(db, key, &job, 1_000).await);
        finish(db, held.token(), outcome, 2_000)
            .await
            .expect("finish");
    }
    begun(begin(db, "c:4", &job, 1_000).await);
    let mut counts = db.store.intent_counts().await.expect("counts");
    counts.sort_by_key(|c| c.state.as_str());
    let count = |state, count| IntentCount { state, count };
    let mut expected = vec![
        count(IntentState::Completed, 2),
        count(IntentState::InProgress, 1),
        count(IntentState::Unknown, 1),
    ];
    expected.sort_by_key(|c| c.state.as_str());
    assert_eq!(counts, expected);
}

/// A released intent (the call certainly never left) keeps its row as `released`, and
/// the next begin, by any claim and at once, takes it with attempt and fence moved on.
pub async fn intent_finish_released_starts_the_key_afresh(db: &TestDb) {
    let first = claimed(db, "q-1").await;
    let second = claimed(db, "q-2").await;
    let held = begun(begin(db, "mail:1", &first, 1_000).await);
    let released = finish(db, held.token(), IntentOutcome::Released, 2_000).await;
    let released = released.expect("release");
    let expected = IntentRow {
        state: IntentState::Released,
        lease_expires_at: None,
        updated_at: at(2_000),
        ..held.clone()
    };
    assert_eq!(released, expected);
    assert_eq!(stored(db, "mail:1").await, Some(expected));
    let again = begin(db, "mail:1", &second, 3_000).await;
    assert_eq!(
        again,
        IntentBegun::Begun(taken("mail:1", &held, &second, 3_000))
    );
}

/// A fence is never handed out twice for one key: a zombie holder (taken over, then
/// the taker released the call, then a new holder began) cannot renew, finish or
/// release the new holder's intent, and neither can a holder from before a
/// reconciliation found the call absent.
pub async fn intent_fences_never_repeat_after_release_or_absent(db: &TestDb) {
    let zombie_job = claimed(db, "q-1").await;
    let taker = claimed(db, "q-2").await;
    let third = claimed(db, "q-3").await;
    let zombie = begun(begin(db, "again:1", &zombie_job, 1_000).await);
    let took = begun(begin(db, "again:1", &taker, ENDS + 1).await);
    finish(db, took.token(), IntentOutcome::Released, ENDS + 2)
        .await
        .expect("the taker releases");
    let now_held = begun(begin(db, "again:1", &third, ENDS + 3).await);
    assert!(now_held.fence > took.fence, "{now_held:?} after {took:?}");
    let before = stored(db, "again:1").await;
    assert_intent_lost(
        renew(db, zombie.token(), 1_000, ENDS + 4).await,
        &zombie.token(),
    );
    let late = finish(db, zombie.token(), applied("zombie"), ENDS + 4).await;
    assert_intent_lost(late, &zombie.token());
    let late = finish(db, zombie.token(), IntentOutcome::Released, ENDS + 4).await;
    assert_intent_lost(late, &zombie.token());
    assert_eq!(
        stored(db, "again:1").await,
        before,
        "the new holder's intent is untouched"
    );

    // Unkeyed: the lapsed holder's intent goes to unknown, reconciliation finds the call
    // absent, a new holder begins; the lapsed holder still holds nothing.
    let mut params = keyed("absent:1", &zombie_job, 1_000);
    params.unkeyed = true;
    let lapsed = begun(db.store.intent_begin(params.clone()).await.expect("begin"));
    params.job = taker.lease_token();
    params.now = Some(at(ENDS + 1));
    let unknown = match db.store.intent_begin(params.clone()).await.expect("begin") {
        IntentBegun::Reconcile(row) => row,
        other => panic!("an unkeyed takeover reconciles: {other:?}"),
    };
    resolve(
        db,
        unknown.token(),
        &[IntentState::Unknown],
        IntentResolution::Absent,
        ENDS + 2,
    )
    .await
    .expect("absent");
    params.job = third.lease_token();
    params.now = Some(at(ENDS + 3));
    let resent = begun(db.store.intent_begin(params).await.expect("begin"));
    assert!(resent.fence > unknown.fence, "{resent:?} after {unknown:?}");
    let before = stored(db, "absent:1").await;
    assert_intent_lost(
        renew(db, lapsed.token(), 1_000, ENDS + 4).await,
        &lapsed.token(),
    );
    let late = finish(db, lapsed.token(), applied("lapsed"), ENDS + 4).await;
    assert_intent_lost(late, &lapsed.token());
    assert_eq!(
        stored(db, "absent:1").await,
        before,
        "the new holder's intent is untouched"
    );
}

/// A holder whose intent was taken over (a zombie past its lease) cannot record any
/// outcome — completed, released, unknown — nor can a holder record a second one:
/// `IntentLost`, and the row is unchanged. The current holder finishes normally.
pub async fn intent_finish_refuses_a_stale_fence(db: &TestDb) {
    let zombie_job = claimed(db, "q-1").await;
    let taker = claimed(db, "q-2").await;
    let unknown = IntentOutcome::Unknown {
        error: "connection reset".into(),
    };
    let outcomes = [applied("x"), IntentOutcome::Released, unknown];
    for (i, outcome) in outcomes.into_iter().enumerate() {
        let key = format!("stale:{i}");
        let zombie = begun(begin(db, &key, &zombie_job, 1_000).await);
        let current = begun(begin(db, &key, &taker, ENDS + 1).await);
        assert_eq!(
            current.fence,
            zombie.fence + 1,
            "a takeover moves the fence"
        );
        let late = finish(db, zombie.token(), outcome.clone(), ENDS + 2).await;
        assert_intent_lost(late, &zombie.token());
        assert_eq!(stored(db, &key).await, Some(current.clone()), "{outcome:?}");
        let done = finish(db, current.token(), applied(&key), ENDS + 3).await;
        let done = done.expect("the current holder's finish");
        assert_eq!(done.state, IntentState::Completed);
        let twice = finish(db, current.token(), outcome, ENDS + 4).await;
        assert_intent_lost(twice, &current.token());
        assert_eq!(
            stored(db, &key).await,
            Some(done),
            "the first outcome stands"
        );
    }
}

/// A holder whose lease has ended still holds the intent until someone takes it over
/// (the fence, not the clock, decides): its outcome is recorded, and a later begin
/// answers it.
pub async fn intent_finish_after_the_lease_lapsed_holds_until_taken_over(db: &TestDb) {
    let job = claimed(db, "q-1").await;
    let other = claimed(db, "q-2").await;
    let held = begun(begin(db, "late", &job, 1_000).await);
    let late = finish(db, held.token(), applied("late"), ENDS + 50_000).await;
    let done = late.expect("a lapsed holder nobody replaced finishes");
    let got = (done.state, done.fence, done.updated_at);
    assert_eq!(got, (IntentState::Completed, 1, at(ENDS + 50_000)));
    let answer = begin(db, "late", &other, ENDS + 50_001).await;
    assert_eq!(answer, IntentBegun::Completed(done));
}

/// Resolves the intent read as `read` from [`OPEN`] at `at(ms)`; the row it leaves.
async fn resolved(
    db: &TestDb,
    read: &IntentRow,
    resolution: IntentResolution,
    ms: i64,
) -> IntentRow {
    let row = resolve(db, read.token(), &OPEN, resolution, ms).await;
    row.expect("resolve")
}

/// Reconciliation resolves an `unknown` intent from the fence it read, fence + 1:
/// `Applied` makes it completed with the result and the remote's id, `Duplicate`
/// records every copy's id; a later begin answers `Completed` for either.
pub async fn intent_resolve_applied_or_duplicate_answers_completed(db: &TestDb) {
    let job = claimed(db, "q-1").await;
    let other = claimed(db, "q-2").await;
    let found = intent_at(db, "r:applied", IntentState::Unknown, &job, 1_000).await;
    let result = json!({ "charge": "ch_1" });
    let apply = IntentResolution::Applied {
        result: result.clone(),
        remote_refs: vec!["ch_1".into()],
    };
    let row = resolved(db, &found, apply, 2_000).await;
    let expected = IntentRow {
        state: IntentState::Completed,
        fence: 2,
        result: Some(result),
        remote_refs: vec!["ch_1".into()],
        updated_at: at(2_000),
        error: row.error.clone(),
        ..found
    };
    assert_eq!(row, expected);
    let answer = begin(db, "r:applied", &other, 3_000).await;
    assert_eq!(answer, IntentBegun::Completed(row));
    let found = intent_at(db, "r:dup", IntentState::Unknown, &job, 1_000).await;
    let copies = vec!["ch_1".to_owned(), "ch_2".to_owned()];
    let dup = IntentResolution::Duplicate {
        remote_refs: copies.clone(),
    };
    let row = resolved(db, &found, dup, 2_000).await;
    let expected = IntentRow {
        state: IntentState::Duplicate,
        fence: 2,
        remote_refs: copies,
        updated_at: at(2_000),
        error: row.error.clone(),
        ..found
    };
    assert_eq!(row, expected);
    let answer = begin(db, "r:dup", &other, 3_000).await;
    assert_eq!(answer, IntentBegun::Completed(row));
}

/// `Manual` hands an `unknown` intent to an operator, fence + 1, with the reason: a
/// begin answers `Reconcile`, and the operator's resolution from `manual` at the fence
/// read settles it (fence + 1 again).
pub async fn intent_resolve_manual_awaits_an_operator(db: &TestDb) {
    let job = claimed(db, "q-1").await;
    let other = claimed(db, "q-2").await;
    let found = intent_at(db, "r:manual", IntentState::Unknown, &job, 1_000).await;
    let why = "the remote has no search".to_owned();
    let manual = IntentResolution::Manual { error: why.clone() };
    let row = resolved(db, &found, manual, 2_000).await;
    let expected = IntentRow {
        state: IntentState::Manual,
        fence: 2,
        error: Some(why),
        updated_at: at(2_000),
        ..found
    };
    assert_eq!(row, expected);
    let answer = begin(db, "r:manual", &other, 3_000).await;
    assert_eq!(answer, IntentBegun::Reconcile(row.clone()));
    let apply = IntentResolution::Applied {
        result: json!(null),
        remote_refs: vec!["ch_9".into()],
    };
    let from = [IntentState::Manual];
    let settled = resolve(db, row.token(), &from, apply, 4_000).await;
    let settled = settled.expect("resolve from manual");
    assert_eq!((settled.state, settled.fence), (IntentState::Completed, 3));
    assert_eq!(stored(db, "r:manual").await, Some(settled));
}

/// `Absent` (the remote does not have the call) makes the intent `released`, fence + 1,
/// and the next begin takes it at once with attempt and fence moved on.
pub async fn intent_resolve_absent_starts_the_key_afresh(db: &TestDb) {
    let job = claimed(db, "q-1").await;
    let other = claimed(db, "q-2").await;
    let found = intent_at(db, "r:absent", IntentState::Unknown, &job, 1_000).await;
    let released = resolved(db, &found, IntentResolution::Absent, 2_000).await;
    let expected = IntentRow {
        state: IntentState::Released,
        fence: found.fence + 1,
        updated_at: at(2_000),
        ..found.clone()
    };
    assert_eq!(released, expected);
    assert_eq!(stored(db, "r:absent").await, Some(expected.clone()));
    let again = begin(db, "r:absent", &other, 3_000).await;
    assert_eq!(
        again,
        IntentBegun::Begun(taken("r:absent", &expected, &other, 3_000))
    );
}

/// A resolution from a read that is no longer true — a fence that moved on, a state not
/// among `from` (also an intent still in progress) — is `Conflict`, whatever it would
/// record, and changes nothing; a resolution of a missing key is `NotFound`.
pub async fn intent_resolve_refuses_a_stale_read(db: &TestDb) {
    let job = claimed(db, "q-1").await;
    let read = intent_at(db, "r:1", IntentState::Unknown, &job, 1_000).await;
    let manual = IntentResolution::Manual {
        error: "cannot tell".into(),
    };
    let now = resolve(db, read.token(), &OPEN, manual, 2_000).await;
    let now = now.expect("resolve");
    let live = begun(begin(db, "r:live", &job, 1_000).await);
    let resolutions = [
        IntentResolution::Applied {
            result: json!(1),
            remote_refs: vec!["ch_1".into()],
        },
        IntentResolution::Absent,
    ];
    for resolution in resolutions {
        let stale = resolve(db, read.token(), &OPEN, resolution.clone(), 3_000).await;
        assert_conflict(stale, "a fence that moved on");
        let from = [IntentState::Unknown];
        let wrong = resolve(db, now.token(), &from, resolution.clone(), 3_000).await;
        assert_conflict(wrong, "a state not in `from`");
        assert_eq!(stored(db, "r:1").await, Some(now.clone()));
        let held = resolve(db, live.token(), &OPEN, resolution.clone(), 3_000).await;
        assert_conflict(held, "an intent in progress");
        assert_eq!(stored(db, "r:live").await, Some(live.clone()));
        let token = IntentToken {
            key: "r:none".into(),
            fence: 1,
        };
        let missing = resolve(db, token, &OPEN, resolution, 3_000).await;
        let is_not_found = matches!(missing, Err(StoreError::NotFound { .. }));
        assert!(is_not_found, "a missing key: {missing:?}");
    }
}

/// The audit sweep's path: a completed intent whose remote holds two copies is resolved
/// `Duplicate` from `completed`, fence + 1, with every copy's id; it keeps its result,
/// and a later begin answers `Completed` with it.
pub async fn intent_resolve_duplicate_from_completed_keeps_the_result(db: &TestDb) {
    let job = claimed(db, "q-1").await;
    let other = claimed(db, "q-2").await;
    let done = intent_at(db, "audit:1", IntentState::Completed, &job, 1_000).await;
    let copies = vec!["ch_a".to_owned(), "ch_b".to_owned()];
    let dup = IntentResolution::Duplicate {
        remote_refs: copies.clone(),
    };
    let row = resolve(db, done.token(), &[IntentState::Completed], dup, 2_000).await;
    let row = row.expect("resolve");
    let expected = IntentRow {
        state: IntentState::Duplicate,
        fence: 2,
        remote_refs: copies,
        updated_at: at(2_000),
        error: row.error.clone(),
        ..done
    };
    assert_eq!(row, expected);
    assert_eq!(stored(db, "audit:1").await, Some(row.clone()));
    assert_eq!(
        begin(db, "audit:1", &other, 3_000).await,
        IntentBegun::Completed(row)
    );
}

/// A begin in the caller's transaction, after the job's fence check as in an effect
/// transaction, leaves nothing when rolled back and is stored as returned once
/// committed.
pub async fn intent_begin_commits_with_its_transaction(db: &TestDb) {
    let job = claimed(db, "q-1").await;
    for commit in [false, true] {
        let mut tx = db.store.begin().await.expect("begin");
        let lock = JobLock::of(job.lease_token());
        tx.job_lock(lock).await.expect("lock");
        let answer = tx.intent_begin(keyed("tx:1", &job, 1_000)).await;
        let held = begun(answer.expect("begin in tx"));
        assert_eq!(held, fresh("tx:1", &job, 1_000));
        let expected = if commit {
            tx.commit().await.expect("commit");
            Some(held)
        } else {
            tx.rollback().await.expect("rollback");
            None
        };
        assert_eq!(stored(db, "tx:1").await, expected, "committed: {commit}");
    }
}

/// A renewal, a finish, a release and a resolution made in a transaction that is
/// rolled back or dropped leave the intent as it was.
pub async fn intent_writes_roll_back_with_their_transaction(db: &TestDb) {
    let job = claimed(db, "q-1").await;
    let held = begun(begin(db, "tx:1", &job, 1_000).await);
    let mut tx = db.store.begin().await.expect("begin");
    let renewal = IntentRenew {
        token: held.token(),
        lease_ms: 60_000,
        now: Some(at(3_000)),
    };
    tx.intent_renew(renewal).await.expect("renew in tx");
    tx.rollback().await.expect("rollback");
    for outcome in [applied("tx:1"), IntentOutcome::Released] {
        let mut tx = db.store.begin().await.expect("begin");
        let params = IntentFinish {
            token: held.token(),
            outcome,
            now: Some(at(3_000)),
        };
        tx.intent_finish(params).await.expect("finish in tx");
        drop(tx);
    }
    assert_eq!(stored(db, "tx:1").await, Some(held.clone()), "unchanged");
    let unknown = IntentOutcome::Unknown {
        error: "reset".into(),
    };
    let found = finish(db, held.token(), unknown, 4_000).await;
    let found = found.expect("finish");
    let mut tx = db.store.begin().await.expect("begin");
    let params = IntentResolve {
        token: found.token(),
        from: OPEN.to_vec(),
        resolution: IntentResolution::Absent,
        now: Some(at(5_000)),
    };
    let released = tx.intent_resolve(params).await.expect("resolve in tx");
    assert_eq!(released.state, IntentState::Released);
    tx.rollback().await.expect("rollback");
    assert_eq!(
        stored(db, "tx:1").await,
        Some(found),
        "a rolled-back resolution"
    );
}

/// `intent_get` of a key never begun is `None`, and listing an empty store lists
/// nothing.
pub async fn intent_get_of_a_missing_key_is_none(db: &TestDb) {
    assert_eq!(stored(db, "never").await, None);
    assert!(keys(db, IntentList::default()).await.is_empty());
}

/// [`IntentList::default`] changed by `f`.
fn filter(f: impl FnOnce(&mut IntentList)) -> IntentList {
    let mut params = IntentList::default();
    f(&mut params);
    params
}

/// The keys `intent_list` answers for `params`; a zero limit means 100.
async fn keys(db: &TestDb, mut params: IntentList) -> Vec<String> {
    if params.limit == 0 {
        params.limit = 100;
    }
    let rows = db.store.intent_list(params).await.expect("intent_list");
    rows.into_iter().map(|r| r.key).collect()
}

/// Five intents of two jobs, keyed and unkeyed, in five states, created and changed at
/// different times (not in key order): the jobs, and the rows in key order.
async fn list_fixture(db: &TestDb) -> (JobRow, JobRow, Vec<IntentRow>) {
    let one = claimed(db, "q-1").await;
    let two = claimed(db, "q-2").await;
    let spec = [
        ("k-b", &two, true, IntentState::Unknown, 1_000, 5_000),
        ("k-d", &two, false, IntentState::Failed, 2_000, 2_500),
        ("k-c", &one, false, IntentState::InProgress, 3_000, 3_000),
        ("k-a", &one, false, IntentState::Completed, 4_000, 6_000),
        ("k-e", &one, true, IntentState::Manual, 5_000, 5_500),
    ];
    let mut rows = Vec::new();
    for (key, job, unkeyed, state, created, updated) in spec {
        let lease = job.lease_token();
        let p = begin_params(key, FP, unkeyed, INTENT_LEASE_MS, lease, at(created));
        rows.push(intent_in(db, p, state, updated).await);
    }
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    (one, two, rows)
}

/// `intent_list` answers the stored rows in key order, filtered by states (none = all),
/// keyed or unkeyed, last changed before a time (strictly), created since a time
/// (inclusively) and job, and by any of them combined.
pub async fn intent_list_filters_in_key_order(db: &TestDb) {
    let (one, two, rows) = list_fixture(db).await;
    let all = IntentList {
        limit: 100,
        ..IntentList::default()
    };
    assert_eq!(db.store.intent_list(all).await.expect("intent_list"), rows);
    use IntentState::*;
    let filters = [
        (filter(|p| p.states = vec![InProgress]), vec!["k-c"]),
        (
            filter(|p| p.states = vec![Completed, Failed]),
            vec!["k-a", "k-d"],
        ),
        (
            filter(|p| p.states = vec![Unknown, Manual]),
            vec!["k-b", "k-e"],
        ),
        (filter(|p| p.unkeyed = Some(true)), vec!["k-b", "k-e"]),
        (
            filter(|p| p.unkeyed = Some(false)),
            vec!["k-a", "k-c", "k-d"],
        ),
        (
            filter(|p| p.updated_before = Some(at(5_000))),
            vec!["k-c", "k-d"],
        ),
        (
            filter(|p| p.created_since = Some(at(4_000))),
            vec!["k-a", "k-e"],
        ),
        (filter(|p| p.job_id = Some(two.id)), vec!["k-b", "k-d"]),
        (
            filter(|p| p.states = vec![InProgress, Completed, Unknown]),
            vec!["k-a", "k-b", "k-c"],
        ),
    ];
    for (params, expected) in filters {
        let what = format!("{params:?}");
        assert_eq!(keys(db, params).await, expected, "{what}");
    }
    let combined = IntentList {
        states: vec![InProgress, Completed, Unknown],
        job_id: Some(one.id),
        unkeyed: Some(false),
        ..IntentList::default()
    };
    assert_eq!(keys(db, combined).await, ["k-a", "k-c"]);
}

/// `intent_list` pages in key order: `limit` rows at most, from the key after `after`.
pub async fn intent_list_pages_with_after(db: &TestDb) {
    list_fixture(db).await;
    let mut pages = Vec::new();
    let mut after = None;
    loop {
        let page = IntentList {
            after: after.clone(),
            limit: 2,
            ..IntentList::default()
        };
        let got = keys(db, page).await;
        if got.is_empty() {
            break;
        }
        after = got.last().cloned();
        pages.push(got);
    }
    assert_eq!(pages, [vec!["k-a", "k-b"], vec!["k-c", "k-d"], vec!["k-e"]]);
}

/// Purges up to `limit` intents created before `before`; how many went.
async fn purge(db: &TestDb, before: Timestamp, limit: u32) -> u64 {
    let params = Purge {
        target: PurgeTarget::Intents,
        before,
        limit,
    };
    db.store.purge(params).await.expect("purge")
}

/// How many intents a purge with cutoff `before` would delete.
async fn count(db: &TestDb, before: Timestamp) -> u64 {
    let target = PurgeTarget::Intents;
    let n = db.store.purge_count(target, before).await;
    n.expect("purge_count")
}

/// Every intent, in key order.
async fn all_intents(db: &TestDb) -> Vec<IntentRow> {
    let params = IntentList {
        limit: 1_000,
        ..IntentList::default()
    };
    db.store.intent_list(params).await.expect("intent_list")
}

/// The purge of intents takes completed, failed and released ones created before the cutoff
/// (strictly) whose job completed or is gone, oldest first, at most `limit` per call;
/// `purge_count` agrees. It keeps intents in progress, unknown, duplicate or manual at
/// any age, those created at the cutoff or later, and those of a job that may still
/// run again (running, retryable, dead, cancelled). A purged key starts afresh.
pub async fn intent_purge_takes_finished_intents_of_finished_jobs(db: &TestDb) {
    let done = claimed(db, "p-done").await;
    let gone = claimed(db, "p-gone").await;
    let mut live = Vec::new();
    for queue in ["p-running", "p-retryable", "p-dead", "p-cancelled"] {
        live.push(claimed(db, queue).await);
    }
    intent_at(db, "done:completed", IntentState::Completed, &done, 1_000).await;
    intent_at(db, "gone:completed", IntentState::Completed, &gone, 2_000).await;
    intent_at(db, "done:failed", IntentState::Failed, &done, 3_000).await;
    intent_at(db, "done:released", IntentState::Released, &done, 4_000).await;
    for state in [IntentState::InProgress, IntentState::Unknown] {
        intent_at(db, &format!("done:{state}"), state, &done, 1_000).await;
    }
    for state in [IntentState::Duplicate, IntentState::Manual] {
        intent_at(db, &format!("done:{state}"), state, &done, 1_000).await;
    }
    intent_at(db, "done:at-cutoff", IntentState::Completed, &done, 5_000).await;
    intent_at(db, "done:newer", IntentState::Failed, &done, 6_000).await;
    for job in &live {
        let key = format!("{}:completed", job.queue);
        intent_at(db, &key, IntentState::Completed, job, 1_000).await;
    }
    finish_jobs(db, &done, &gone, &live).await;
    let purged = [
        "done:completed",
        "gone:completed",
        "done:failed",
        "done:released",
    ];
    let mut kept = all_intents(db).await;
    kept.retain(|r| !purged.contains(&r.key.as_str()));
    assert_eq!(kept.len(), 10);
    let cutoff = at(5_000);
    assert_eq!(count(db, cutoff).await, 4);
    assert_eq!(purge(db, cutoff, 1).await, 1);
    assert_eq!(stored(db, "done:completed").await, None, "the oldest first");
    assert!(
        stored(db, "gone:completed").await.is_some(),
        "the next waits"
    );
    assert_eq!(count(db, cutoff).await, 3);
    assert_eq!(purge(db, cutoff, 10).await, 3);
    assert_eq!(count(db, cutoff).await, 0);
    assert_eq!(purge(db, cutoff, 10).await, 0);
    assert_eq!(all_intents(db).await, kept, "the rest untouched");
    let again = begin(db, "done:failed", &live[0], 7_000).await;
    assert_eq!(
        again,
        IntentBegun::Begun(fresh("done:failed", &live[0], 7_000))
    );
}

/// Completes `done` late, completes `gone` early and purges it, and leaves `live` able
/// to run again: running, retryable, dead, cancelled.
async fn finish_jobs(db: &TestDb, done: &JobRow, gone: &JobRow, live: &[JobRow]) {
    complete(db, done.lease_token(), at(9_000))
        .await
        .expect("complete");
    complete(db, gone.lease_token(), at(2_000))
        .await
        .expect("complete");
    let jobs = Purge {
        target: PurgeTarget::FinishedJobs,
        before: at(3_000),
        limit: 10,
    };
    assert_eq!(db.store.purge(jobs).await.expect("purge jobs"), 1);
    assert_eq!(db.store.job_get(gone.id).await.expect("job_get"), None);
    let retry = fail(db, live[1].lease_token(), Some(60_000), at(2_000)).await;
    retry.expect("fail to retryable");
    let dead = fail(db, live[2].lease_token(), None, at(2_000)).await;
    dead.expect("fail to dead");
    cancel(db, live[3].id, at(4_000)).await.expect("cancel");
}
