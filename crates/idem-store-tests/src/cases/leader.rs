//! `leader`: one process at a time leads the maintenance duties, elected through a row
//! with a lease and a fence. A leadership is taken only when none is in force; each new
//! leader gets the next fence; a stale leader can neither renew nor pass the check that
//! fences its writes; and an election waits for a leader's open transaction that
//! checked its leadership, so two leaders never act at once.

use idem_store::{
    JobRescue, JobState, LeaderElect, LeaderRenew, LeaderToken, Leadership, StoreError, StoreResult,
};

use crate::TestDb;
use crate::fixture::{assert_waits_for, at, claim, get, insert_one, job, spawn_started};
use crate::harness::within;

const NAME: &str = "maintenance";

fn elect_params(holder: &str, ttl_ms: i64, now_ms: i64) -> LeaderElect {
    LeaderElect {
        name: NAME.to_owned(),
        holder: holder.to_owned(),
        ttl_ms,
        now: Some(at(now_ms)),
    }
}

async fn elect(db: &TestDb, holder: &str, ttl_ms: i64, now_ms: i64) -> Leadership {
    db.store
        .leader_elect(elect_params(holder, ttl_ms, now_ms))
        .await
        .expect("leader_elect")
}

async fn renew(
    db: &TestDb,
    token: &LeaderToken,
    ttl_ms: i64,
    now_ms: i64,
) -> StoreResult<Leadership> {
    let params = LeaderRenew {
        token: token.clone(),
        ttl_ms,
        now: Some(at(now_ms)),
    };
    db.store.leader_renew(params).await
}

/// `leader_check` in a transaction of its own, rolled back.
async fn check(db: &TestDb, token: &LeaderToken, now_ms: i64) -> StoreResult<()> {
    let mut tx = db.store.begin().await.expect("begin");
    let checked = tx.leader_check(token.clone(), Some(at(now_ms))).await;
    tx.rollback().await.expect("rollback");
    checked
}

fn assert_lost<T: std::fmt::Debug>(result: StoreResult<T>, token: &LeaderToken, what: &str) {
    match result {
        Err(StoreError::LeadershipLost {
            name,
            holder,
            fence,
        }) => assert_eq!(
            (name.as_str(), holder.as_str(), fence),
            (token.name.as_str(), token.holder.as_str(), token.fence),
            "{what}: the error names the stale leadership"
        ),
        other => panic!("{what}: expected LeadershipLost, got {other:?}"),
    }
}

fn who(l: &Leadership) -> (&str, i64) {
    (l.holder.as_str(), l.fence)
}

/// Nobody leads: the first candidate is elected under fence 1 until now + ttl. While its
/// lease is in force (renewed or not) another candidate is answered with the leader in
/// force; once it ended, the next candidate is elected under fence 2, and the old
/// leader can neither renew nor pass the check. A resignation ends the lease at once.
pub async fn leader_elect_takes_only_an_ended_leadership_under_the_next_fence(db: &TestDb) {
    let a = elect(db, "a", 1_000, 0).await;
    assert_eq!(who(&a), ("a", 1));
    assert_eq!(
        (a.elected_at, a.expires_at, a.now),
        (at(0), at(1_000), at(0))
    );
    assert!(a.current());
    let seen = elect(db, "b", 1_000, 500).await;
    assert_eq!(who(&seen), ("a", 1), "a leads until its lease ends");
    assert_eq!((seen.expires_at, seen.now), (at(1_000), at(500)));

    let renewed = renew(db, &a.token(), 1_000, 900).await.expect("renew");
    assert_eq!((who(&renewed), renewed.expires_at), (("a", 1), at(1_900)));
    assert_eq!(who(&elect(db, "b", 1_000, 1_500).await), ("a", 1));
    check(db, &a.token(), 1_899).await.expect("a leads at 1899");

    let b = elect(db, "b", 1_000, 1_900).await;
    assert_eq!(who(&b), ("b", 2), "a lease that ended at now is over");
    assert_eq!(b.expires_at, at(2_900));
    assert_lost(
        renew(db, &a.token(), 1_000, 1_950).await,
        &a.token(),
        "a's renewal",
    );
    assert_lost(check(db, &a.token(), 1_950).await, &a.token(), "a's check");
    assert_lost(
        check(db, &a.token(), 1_000).await,
        &a.token(),
        "a's check at a time its lease was in force",
    );
    assert_eq!(who(&elect(db, "a", 1_000, 2_000).await), ("b", 2));

    let resigned = renew(db, &b.token(), 0, 2_100).await.expect("resign");
    assert_eq!(resigned.expires_at, at(2_100));
    assert!(!resigned.current());
    assert_lost(check(db, &b.token(), 2_100).await, &b.token(), "b's check");
    assert_lost(
        renew(db, &b.token(), 1_000, 2_100).await,
        &b.token(),
        "b's renewal after resigning",
    );
    let again = elect(db, "a", 1_000, 2_100).await;
    assert_eq!(who(&again), ("a", 3), "a fence is never handed out twice");
    assert_lost(
        check(db, &a.token(), 2_200).await,
        &a.token(),
        "fence 1 of a",
    );
    check(db, &again.token(), 2_200)
        .await
        .expect("fence 3 of a");
}

/// A stale leader's sweep is refused in its transaction and moves nothing; the leader
/// in force sweeps.
pub async fn leader_check_refuses_a_stale_leader_s_rescue(db: &TestDb) {
    let row = insert_one(db, job("held"), at(0)).await;
    let claimed = claim(db, "default", 1, at(0)).await;
    assert_eq!(claimed.len(), 1);
    let a = elect(db, "a", 1_000, 0).await;
    let b = elect(db, "b", 60_000, 1_000).await;
    assert_eq!(who(&b), ("b", 2));
    let rescue = |now_ms| JobRescue {
        limit: 100,
        retry_in_ms: 0,
        max_attempts: None,
        now: Some(at(now_ms)),
    };
    let later = 10 * 60_000;
    let mut tx = db.store.begin().await.expect("begin");
    assert_lost(
        tx.leader_check(a.token(), Some(at(later))).await,
        &a.token(),
        "a's check",
    );
    tx.rollback().await.expect("rollback");
    assert_eq!(get(db, row.id).await.state, JobState::Running);

    let mut tx = db.store.begin().await.expect("begin");
    tx.leader_check(b.token(), Some(at(30_000)))
        .await
        .expect("b leads");
    let rescued = tx.job_rescue(rescue(later)).await.expect("rescue");
    tx.commit().await.expect("commit");
    assert_eq!(rescued.len(), 1);
    assert_eq!(get(db, row.id).await.state, JobState::Retryable);
}

/// An election after the leader's lease ended waits while the leader's transaction that
/// checked its leadership is open, and elects the candidate once it commits: the old
/// leader's writes and the new leader's never overlap.
pub async fn leader_election_waits_for_the_leader_s_open_transaction(db: &TestDb) {
    let a = elect(db, "a", 1_000, 0).await;
    let mut tx = db.store.begin().await.expect("begin");
    tx.leader_check(a.token(), Some(at(500)))
        .await
        .expect("a leads at 500");
    let store = db.store.clone();
    let racer =
        spawn_started(async move { store.leader_elect(elect_params("b", 1_000, 2_000)).await })
            .await;
    assert_waits_for(db, &mut tx, &racer).await;
    tx.commit().await.expect("commit a's transaction");
    let b = within(30, "the election after a's commit", racer)
        .await
        .expect("election task")
        .expect("leader_elect");
    assert_eq!(who(&b), ("b", 2));
}

/// Candidates racing for an ended leadership: exactly one is elected, and every answer
/// names it.
pub async fn leader_elect_concurrently_elects_one(db: &TestDb) {
    let a = elect(db, "a", 1_000, 0).await;
    assert_eq!(who(&a), ("a", 1));
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store = db.store.clone();
            let params = elect_params(&format!("c{i}"), 1_000, 5_000);
            tokio::spawn(async move { store.leader_elect(params).await })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.expect("task").expect("leader_elect"));
    }
    let first = who(&answers[0]);
    assert_eq!(first.1, 2, "one election after a's");
    assert!(
        answers.iter().all(|l| who(l) == first),
        "every candidate is answered with the one elected: {answers:?}"
    );
}
