//! `queue_pause`: a paused queue is not claimed from, by a claim statement nor by an
//! insert that would claim its job for a local worker; enqueues into it go on; resuming
//! it lets claims take what waited, in claim order.

use idem_store::{InsertClaim, JobState, NewJob, QueuePause};

use super::enqueue_key::{enqueue, keyed};
use crate::TestDb;
use crate::fixture::{at, claim, get, ids, insert, insert_one, job_in, t0};

fn pause(queue: &str, ms: i64) -> QueuePause {
    QueuePause {
        queue: queue.to_owned(),
        by: Some("ops".to_owned()),
        now: Some(at(ms)),
    }
}

/// Pausing stops claims from that queue only; enqueues are kept; a second pause keeps the
/// first; resuming lets a claim take every job that waited, in claim order.
pub async fn queue_pause_stops_claims_until_resumed(db: &TestDb) {
    let before = insert(db, vec![job_in("mail", "a"), job_in("mail", "b")], t0()).await;
    let other = insert_one(db, job_in("ledger", "l"), t0()).await;
    assert!(db.store.queue_pause(pause("mail", 1_000)).await.unwrap());
    assert!(
        !db.store.queue_pause(pause("mail", 2_000)).await.unwrap(),
        "a second pause of a paused queue reports it paused already"
    );
    let paused = db.store.queue_paused().await.unwrap();
    assert_eq!(paused.len(), 1, "{paused:?}");
    assert_eq!(paused[0].queue, "mail");
    assert_eq!(paused[0].paused_at, at(1_000), "the first pause is kept");
    assert_eq!(paused[0].paused_by.as_deref(), Some("ops"));

    assert!(claim(db, "mail", 10, at(3_000)).await.is_empty());
    let during = insert_one(db, job_in("mail", "c"), at(3_000)).await;
    assert_eq!(during.state, JobState::Available, "enqueues go on");
    assert!(claim(db, "mail", 10, at(4_000)).await.is_empty());
    assert_eq!(
        ids(&claim(db, "ledger", 10, at(4_000)).await),
        vec![other.id],
        "other queues are claimed as ever"
    );

    assert!(db.store.queue_resume("mail".into()).await.unwrap());
    assert!(!db.store.queue_resume("mail".into()).await.unwrap());
    assert!(!db.store.queue_resume("never-paused".into()).await.unwrap());
    assert!(db.store.queue_paused().await.unwrap().is_empty());
    let mut expected = ids(&before);
    expected.push(during.id);
    assert_eq!(ids(&claim(db, "mail", 10, at(5_000)).await), expected);
}

/// An insert asked to claim its job for a local worker inserts it unclaimed while its
/// queue is paused (no lease, fence 0, the returned row as stored), with or without an
/// enqueue key; after resuming, a claim takes it with fence 1.
pub async fn queue_pause_inserts_a_local_claim_unclaimed(db: &TestDb) {
    assert!(db.store.queue_pause(pause("mail", 0)).await.unwrap());
    let claimed = |job: NewJob| NewJob {
        claim: Some(InsertClaim {
            worker: "local".into(),
            lease_ms: 30_000,
        }),
        ..job
    };
    let plain = insert_one(db, claimed(job_in("mail", "plain")), t0()).await;
    let with_key = enqueue(db, vec![claimed(keyed("mail", "keyed", "k1"))], t0())
        .await
        .remove(0)
        .job;
    let elsewhere = insert_one(db, claimed(job_in("ledger", "l")), t0()).await;
    assert_eq!(
        elsewhere.state,
        JobState::Running,
        "other queues still dispatch"
    );
    for row in [&plain, &with_key] {
        assert_eq!(row.state, JobState::Available, "{row:?}");
        assert_eq!((row.attempt, row.fence), (0, 0), "{row:?}");
        assert_eq!(row.lease_owner, None, "{row:?}");
        assert_eq!(row.lease_expires_at, None, "{row:?}");
        assert_eq!(row.attempted_at, None, "{row:?}");
        assert_eq!(
            &get(db, row.id).await,
            row,
            "the returned row is the stored one"
        );
    }
    assert!(claim(db, "mail", 10, at(1_000)).await.is_empty());
    assert!(db.store.queue_resume("mail".into()).await.unwrap());
    let taken = claim(db, "mail", 10, at(2_000)).await;
    assert_eq!(ids(&taken), vec![plain.id, with_key.id]);
    assert!(taken.iter().all(|j| j.fence == 1 && j.attempt == 1));
}
