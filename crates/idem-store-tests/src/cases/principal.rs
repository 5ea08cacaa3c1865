//! The principal a job was enqueued by (`idem_job.principal`, the HTTP API's tenant):
//! kept by the insert (`None` for the library and the CLI), and a filter of `job_list`,
//! `job_claim` and `intent_list` (`None` = any job). A claim for a principal takes only
//! that principal's jobs and leaves the others waiting as they were.

use idem_store::{IntentList, JobClaim, JobDiscard, JobList, JobState, NewJob};

use super::intent::{begin, begun};
use crate::TestDb;
use crate::fixture::{
    at, claim_params, fail, get, ids, insert, insert_one, job, job_in, list, running, t0,
};

/// The principal of most jobs here.
const ALICE: &str = "alice";
/// Another principal.
const BOB: &str = "bob";

/// [`job_in`] `queue` enqueued by `principal`.
fn job_of(principal: Option<&str>, queue: &str) -> NewJob {
    NewJob {
        principal: principal.map(str::to_owned),
        ..job_in(queue, "call")
    }
}

/// An insert keeps each job's principal, in a batch that mixes principals and none, as
/// returned and as stored.
pub async fn principal_insert_keeps_the_principal(db: &TestDb) {
    let rows = insert(
        db,
        vec![
            job_of(Some(ALICE), "q"),
            job_of(None, "q"),
            job_of(Some(BOB), "q"),
        ],
        t0(),
    )
    .await;
    let principals: Vec<Option<&str>> = rows.iter().map(|r| r.principal.as_deref()).collect();
    assert_eq!(principals, vec![Some(ALICE), None, Some(BOB)]);
    for row in &rows {
        assert_eq!(&get(db, row.id).await, row, "job_get after insert");
    }
    let one = insert_one(db, job("plain"), t0()).await;
    assert_eq!(one.principal, None, "the library's jobs have none");
}

/// `job_list` with a principal lists only that principal's jobs, newest first, alone
/// and with the other filters; without one it lists every job.
pub async fn principal_list_filters_by_principal(db: &TestDb) {
    let rows = insert(
        db,
        vec![
            job_of(Some(ALICE), "q1"),
            job_of(Some(BOB), "q1"),
            job_of(None, "q1"),
            job_of(Some(ALICE), "q2"),
            job_of(Some(ALICE), "q1"),
        ],
        t0(),
    )
    .await;
    let all = ids(&rows);
    let by = |principal: Option<&str>, queue: Option<&str>| JobList {
        principal: principal.map(str::to_owned),
        queue: queue.map(str::to_owned),
        ..JobList::default()
    };
    assert_eq!(
        ids(&list(db, by(Some(ALICE), None)).await),
        vec![all[4], all[3], all[0]]
    );
    assert_eq!(ids(&list(db, by(Some(BOB), None)).await), vec![all[1]]);
    assert_eq!(
        ids(&list(db, by(Some(ALICE), Some("q1"))).await),
        vec![all[4], all[0]]
    );
    assert!(list(db, by(Some("carol"), None)).await.is_empty());
    assert_eq!(list(db, by(None, None)).await.len(), 5);
    let paged = JobList {
        before_id: Some(all[4]),
        limit: 1,
        ..by(Some(ALICE), None)
    };
    assert_eq!(ids(&list(db, paged).await), vec![all[3]]);
}

/// A claim for a principal takes only that principal's claimable jobs of the queue, in
/// claim order, and leaves every other job waiting untouched; a claim for no principal
/// (`None`) takes the rest, whoever enqueued them.
pub async fn principal_claim_takes_only_that_principals_jobs(db: &TestDb) {
    let rows = insert(
        db,
        vec![
            job_of(Some(ALICE), "q"),
            job_of(Some(BOB), "q"),
            job_of(None, "q"),
            job_of(Some(ALICE), "q"),
            job_of(Some(ALICE), "other"),
        ],
        t0(),
    )
    .await;
    let params = |principal: Option<&str>| JobClaim {
        principal: principal.map(str::to_owned),
        ..claim_params("q", 10, at(1))
    };
    let alice = db.store.job_claim(params(Some(ALICE))).await;
    let alice = alice.expect("claim for alice");
    assert_eq!(ids(&alice), vec![rows[0].id, rows[3].id]);
    assert!(alice.iter().all(|j| j.state == JobState::Running));
    assert_eq!(
        get(db, rows[1].id).await,
        rows[1],
        "bob's job waits untouched"
    );
    assert_eq!(
        get(db, rows[2].id).await,
        rows[2],
        "the library's job waits"
    );
    let none = db.store.job_claim(params(Some("carol"))).await;
    assert!(none.expect("claim for carol").is_empty());
    let any = db.store.job_claim(params(None)).await.expect("claim");
    assert_eq!(ids(&any), vec![rows[1].id, rows[2].id]);
    assert_eq!(get(db, rows[4].id).await, rows[4], "another queue");
}

/// `intent_list` with a principal lists only the intents whose job, still in the store,
/// was enqueued by that principal: not another's, not the library's, and not those of a
/// job deleted since.
pub async fn principal_intent_list_by_principal(db: &TestDb) {
    let a = running(db, job_of(Some(ALICE), "q-a"), t0()).await;
    let b = running(db, job_of(Some(BOB), "q-b"), t0()).await;
    let n = running(db, job_of(None, "q-n"), t0()).await;
    let gone = running(db, job_of(Some(ALICE), "q-g"), t0()).await;
    for (key, job) in [("k-a", &a), ("k-b", &b), ("k-n", &n), ("k-g", &gone)] {
        begun(begin(db, key, job, 1_000).await);
    }
    begun(begin(db, "k-a2", &a, 1_000).await);
    fail(db, gone.lease_token(), None, at(2_000))
        .await
        .expect("fail to dead");
    let discarded = db
        .store
        .job_discard(JobDiscard { ids: vec![gone.id] })
        .await;
    assert_eq!(discarded.expect("job_discard"), vec![gone.id]);
    let keys = |principal: Option<&str>| {
        let params = IntentList {
            principal: principal.map(str::to_owned),
            limit: 100,
            ..IntentList::default()
        };
        let store = db.store.clone();
        async move {
            let rows = store.intent_list(params).await.expect("intent_list");
            rows.into_iter().map(|r| r.key).collect::<Vec<_>>()
        }
    };
    assert_eq!(keys(Some(ALICE)).await, vec!["k-a", "k-a2"]);
    assert_eq!(keys(Some(BOB)).await, vec!["k-b"]);
    assert!(keys(Some("carol")).await.is_empty());
    assert_eq!(
        keys(None).await,
        vec!["k-a", "k-a2", "k-b", "k-g", "k-n"],
        "no principal: every intent"
    );
}
