//! `attack_pause`: attacks on queue pause at the seam. Every statement that hands a job to
//! a worker (the claim, the insert of a local claim, with and without keys, in one
//! statement with jobs of other queues) tests the pause; jobs a rescue or a failure sends
//! back wait for the resume.

use idem_store::{InsertClaim, JobInsert, JobRescue, JobState, NewJob, QueuePause};

use super::enqueue_key::{enqueue, keyed};
use crate::TestDb;
use crate::fixture::{
    LEASE_MS, assert_waits_for, at, claim, fail, get, ids, insert, job_in, running, spawn_started,
    t0,
};

fn pause(queue: &str, ms: i64) -> QueuePause {
    QueuePause {
        queue: queue.to_owned(),
        by: None,
        now: Some(at(ms)),
    }
}

/// `job` to be inserted claimed by a local worker.
fn local(job: NewJob) -> NewJob {
    NewJob {
        claim: Some(InsertClaim {
            worker: "local".into(),
            lease_ms: LEASE_MS,
        }),
        ..job
    }
}

/// One insert mixing local claims of a paused and an unpaused queue, without keys and
/// with keys (one key twice in the batch): only the unpaused queue's jobs come back
/// running with a lease; the paused queue's are stored and returned unclaimed, and no
/// claim takes them until the resume.
pub async fn attack_pause_one_insert_claims_only_the_unpaused_queues(db: &TestDb) {
    assert!(db.store.queue_pause(pause("mail", 0)).await.unwrap());
    let plain = insert(
        db,
        vec![
            local(job_in("mail", "a")),
            local(job_in("ledger", "b")),
            local(job_in("mail", "c")),
        ],
        at(1_000),
    )
    .await;
    let keyed_rows: Vec<_> = enqueue(
        db,
        vec![
            local(keyed("mail", "d", "k1")),
            local(keyed("ledger", "e", "k1")),
            local(keyed("mail", "f", "k1")),
            local(keyed("mail", "g", "k2")),
        ],
        at(1_000),
    )
    .await
    .into_iter()
    .map(|e| e.job)
    .collect();
    let mut rows = plain;
    rows.extend(keyed_rows);
    for row in &rows {
        let stored = get(db, row.id).await;
        match row.queue.as_str() {
            "mail" => {
                assert_eq!(row.state, JobState::Available, "{row:?}");
                assert_eq!((row.attempt, row.fence), (0, 0), "{row:?}");
                assert_eq!(
                    (row.lease_owner.as_deref(), row.lease_expires_at),
                    (None, None)
                );
            }
            _ => {
                assert_eq!(row.state, JobState::Running, "{row:?}");
                assert_eq!(row.lease_owner.as_deref(), Some("local"), "{row:?}");
            }
        }
        assert_eq!(&stored, row, "the returned row is the stored one");
    }
    assert!(claim(db, "mail", 10, at(2_000)).await.is_empty());
    assert!(db.store.queue_resume("mail".into()).await.unwrap());
    let mut mail: Vec<i64> = rows
        .iter()
        .filter(|r| r.queue == "mail")
        .map(|r| r.id)
        .collect();
    mail.sort_unstable();
    mail.dedup();
    assert_eq!(mail.len(), 4, "a, c, d and g: f got d's job back");
    assert_eq!(ids(&claim(db, "mail", 10, at(3_000)).await), mail);
}

/// Jobs a rescue (an expired lease) or a failed attempt sends back while their queue is
/// paused wait: no claim takes them until the resume, which takes both with the next
/// fence.
pub async fn attack_pause_rescued_and_failed_jobs_wait_for_the_resume(db: &TestDb) {
    let lost = running(db, job_in("mail", "lost"), t0()).await;
    let failing = running(db, job_in("mail", "failing"), t0()).await;
    assert!(db.store.queue_pause(pause("mail", 1_000)).await.unwrap());
    fail(db, failing.lease_token(), Some(0), at(2_000))
        .await
        .expect("fail");
    let rescued = db
        .store
        .job_rescue(JobRescue {
            limit: 10,
            retry_in_ms: 0,
            max_attempts: None,
            now: Some(at(LEASE_MS + 1)),
        })
        .await
        .unwrap();
    assert_eq!(ids(&rescued), vec![lost.id]);
    assert!(
        claim(db, "mail", 10, at(LEASE_MS + 10_000))
            .await
            .is_empty()
    );
    assert!(db.store.queue_resume("mail".into()).await.unwrap());
    let taken = claim(db, "mail", 10, at(LEASE_MS + 20_000)).await;
    assert_eq!(ids(&taken), vec![lost.id, failing.id]);
    assert!(
        taken.iter().all(|j| j.fence == 2 && j.attempt == 2),
        "{taken:?}"
    );
}

/// PostgreSQL: an insert of a local claim with an enqueue key another transaction holds
/// inserts its job claimed, then waits on the key; the queue is paused (the pause
/// commits); the holder rolls back, the insert takes the key; its claim is given back
/// (`job/unclaim_paused.sql`, after the lease renewal) and the job commits available.
/// Without that statement the job committed running, leased to the local worker, after
/// the pause (found by this attack).
pub async fn attack_pause_keyed_local_claim_waiting_on_its_key_commits_after_the_pause(
    db: &TestDb,
) {
    let mut holder = db.store.begin().await.unwrap();
    holder
        .job_insert(JobInsert {
            jobs: vec![keyed("mail", "held", "k")],
            key_window_ms: 60_000,
            now: Some(t0()),
        })
        .await
        .unwrap();
    let store = db.store.clone();
    let racer = spawn_started(async move {
        let params = JobInsert {
            jobs: vec![local(keyed("mail", "local", "k"))],
            key_window_ms: 60_000,
            now: Some(t0()),
        };
        store.job_insert(params).await
    })
    .await;
    assert_waits_for(db, &mut holder, &racer).await;
    assert!(db.store.queue_pause(pause("mail", 0)).await.unwrap());
    holder.rollback().await.unwrap();
    let row = racer.await.unwrap().unwrap().remove(0);
    assert!(!row.deduplicated, "{row:?}");
    assert_eq!(
        (row.job.state, row.job.lease_owner.as_deref()),
        (JobState::Available, None),
        "a job of queue mail was committed claimed after its pause committed: {row:?}"
    );
}
