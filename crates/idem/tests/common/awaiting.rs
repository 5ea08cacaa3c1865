//! A job awaiting an intent, for the tests of its put-back: a `pay` job claimed by a
//! worker elsewhere (the protocol), holding intent [`KEY`] and marking it `unknown`.

use idem::{
    Idem, IntentResolution, IntentRow, IntentState, Job, JobRow, JobState, ProtocolClaim,
    WorkerProtocol,
};
use idem_store::{IntentBegin, IntentBegun, IntentFinish, IntentOutcome, LeaseToken};
use idem_store_tests::TestDb;
use serde_json::json;

use super::{client, config, job};

pub const QUEUE: &str = "pay";
pub const KEY: &str = "pay:order-1";

pub fn claim_one() -> ProtocolClaim {
    ProtocolClaim {
        queue: QUEUE.into(),
        kinds: vec!["pay".into()],
        limit: 1,
        lease_ms: None,
        worker: "elsewhere".into(),
        principal: None,
    }
}

/// Job `new` enqueued and claimed by a worker elsewhere, holding intent `KEY` (unkeyed,
/// fingerprint "f") in progress.
pub async fn running_with_intent(
    idem: &Idem,
    protocol: &WorkerProtocol,
    new: Job,
) -> (JobRow, IntentRow) {
    let id = idem.enqueue(new).await.unwrap().job.id;
    let job = protocol.claim(claim_one()).await.unwrap().remove(0);
    assert_eq!(job.id, id, "the job just enqueued is the one claimed");
    let held = begin(idem, job.lease_token()).await;
    let IntentBegun::Begun(held) = held else {
        panic!("a new key is begun: {held:?}");
    };
    (job, held)
}

pub async fn begin(idem: &Idem, lease: LeaseToken) -> IntentBegun {
    let begin = IntentBegin {
        key: KEY.into(),
        fingerprint: "f".into(),
        unkeyed: true,
        lease_ms: 30_000,
        job: lease,
        now: None,
    };
    idem.store().intent_begin(begin).await.unwrap()
}

/// A client, the protocol of a worker elsewhere, its running job `new`, and the job's
/// unkeyed intent marked `unknown` (the call may or may not have been applied).
pub async fn running_with_unknown_intent_of(
    db: &TestDb,
    new: Job,
) -> (Idem, WorkerProtocol, JobRow, IntentRow) {
    let idem = client(db, None);
    let protocol = WorkerProtocol::new(idem.clone(), config(QUEUE, 1)).unwrap();
    let (job, held) = running_with_intent(&idem, &protocol, new).await;
    let unknown = mark_unknown(&idem, &held).await;
    (idem, protocol, job, unknown)
}

pub async fn running_with_unknown_intent(db: &TestDb) -> (Idem, WorkerProtocol, JobRow, IntentRow) {
    running_with_unknown_intent_of(db, Job::new("pay", json!({"order": 1})).queue(QUEUE)).await
}

pub fn applied() -> IntentResolution {
    IntentResolution::Applied {
        result: json!({"id": "r-1"}),
        remote_refs: vec!["r-1".into()],
    }
}

pub async fn state_of(idem: &Idem, id: i64) -> JobState {
    job(idem, id).await.state
}

pub async fn intent_row(idem: &Idem) -> IntentRow {
    idem.intent(KEY).await.unwrap().expect("the intent")
}

/// [`running_with_unknown_intent`], then the job stops (dead) to await its intent.
pub async fn dead_awaiting_unknown_intent(
    db: &TestDb,
) -> (Idem, WorkerProtocol, JobRow, IntentRow) {
    let (idem, protocol, job, unknown) = running_with_unknown_intent(db).await;
    let error = idem::intent::awaiting_reconciliation(&unknown);
    let dead = protocol.fail(&job, error).await.unwrap();
    assert_eq!(
        dead.state,
        JobState::Dead,
        "the job stops to await its intent"
    );
    (idem, protocol, job, unknown)
}

/// Marks intent `held` (begun, in progress) `unknown`: the call may or may not have been
/// applied. Returns the row.
pub async fn mark_unknown(idem: &Idem, held: &IntentRow) -> IntentRow {
    let finish = IntentFinish {
        token: held.token(),
        outcome: IntentOutcome::Unknown {
            error: "the answer never came".into(),
        },
        now: None,
    };
    let unknown = idem.store().intent_finish(finish).await.unwrap();
    assert_eq!(unknown.state, IntentState::Unknown);
    unknown
}

/// A second `pay` job of the same logical request (same key, same fingerprint),
/// enqueued and claimed: its begin meets the first job's unknown intent. Returns the
/// claimed job and the intent as its begin met it.
pub async fn second_job_meeting(idem: &Idem, protocol: &WorkerProtocol) -> (JobRow, IntentRow) {
    let second = Job::new("pay", json!({"order": 1, "copy": 2})).queue(QUEUE);
    let id = idem.enqueue(second).await.unwrap().job.id;
    let claimed = protocol.claim(claim_one()).await.unwrap().remove(0);
    assert_eq!(claimed.id, id);
    let met = begin(idem, claimed.lease_token()).await;
    let IntentBegun::Reconcile(row) = met else {
        panic!("the second job meets the unknown intent: {met:?}");
    };
    (claimed, row)
}

/// [`second_job_meeting`], then the second job stops (dead) to await the intent.
pub async fn second_job_awaiting(idem: &Idem, protocol: &WorkerProtocol) -> JobRow {
    let (claimed, row) = second_job_meeting(idem, protocol).await;
    let error = idem::intent::awaiting_reconciliation(&row);
    let dead = protocol.fail(&claimed, error).await.unwrap();
    assert_eq!(dead.state, JobState::Dead, "it stops to await the intent");
    claimed
}

/// Two jobs of one logical request dead awaiting its intent, which a reconciler parked
/// `manual` (the remote could not tell): the client, the protocol and the two jobs.
pub async fn two_awaiting_a_parked_intent(db: &TestDb) -> (Idem, WorkerProtocol, JobRow, JobRow) {
    let (idem, protocol, a, _) = dead_awaiting_unknown_intent(db).await;
    let b = second_job_awaiting(&idem, &protocol).await;
    let manual = IntentResolution::Manual {
        error: "the remote could not tell".into(),
    };
    let (parked, back) = idem.resolve_intent(KEY, manual).await.unwrap();
    assert_eq!((parked.state, back), (IntentState::Manual, false));
    (idem, protocol, a, b)
}
