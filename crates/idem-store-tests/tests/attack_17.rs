//! Attack on the maintenance leadership (issue 17, part 4), at the store level.
//!
//! - PostgreSQL: the check's transaction sets an idle timeout so a stalled leader cannot
//!   hold the leadership row for ever, but the election's and the renewal's transactions
//!   lock the same row (`ON CONFLICT DO UPDATE`, `UPDATE`) with no timeout at all: a
//!   process stopped between such a statement and its commit holds up every renewal,
//!   check and election for as long as it is stopped.
//! - PostgreSQL: the check writes what is left of the lease into
//!   `idle_in_transaction_session_timeout`, an `int` of milliseconds; a lease longer than
//!   24.8 days makes every check fail with a database error.

use idem_store::{LeaderElect, LeaderRenew, Leadership, StoreError};
use idem_store_tests::TestDb;
use idem_store_tests::fixture::{assert_waits_for, at, spawn_started};
use idem_store_tests::harness::within;

const NAME: &str = "maintenance";

fn elect_params(holder: &str, ttl_ms: i64, now_ms: Option<i64>) -> LeaderElect {
    LeaderElect {
        name: NAME.to_owned(),
        holder: holder.to_owned(),
        ttl_ms,
        now: now_ms.map(at),
    }
}

async fn elect(db: &TestDb, holder: &str, ttl_ms: i64, now_ms: Option<i64>) -> Leadership {
    db.store
        .leader_elect(elect_params(holder, ttl_ms, now_ms))
        .await
        .expect("leader_elect")
}

/// A candidate whose process stops between its election statement and the commit (the
/// election found `a` in force, so it only locked the row): `a`'s renewal waits for it.
/// A stalled leader inside its check is cut off after max(1 s, what is left of the
/// lease); a stalled candidate should not hold the leader up longer than that either.
/// Here nothing ends the stalled transaction: the renewal waits for ever.
async fn a_stalled_candidate_does_not_hold_the_leader_up_for_ever(db: &TestDb) {
    let a = elect(db, "a", 2_000, None).await;
    assert_eq!(a.holder, "a");
    let mut stalled = db.store.begin().await.expect("begin");
    let seen = stalled
        .leader_elect(elect_params("b", 2_000, None))
        .await
        .expect("b's election");
    assert_eq!(
        (seen.holder.as_str(), seen.fence),
        ("a", a.fence),
        "a leads"
    );

    let store = db.store.clone();
    let token = a.token();
    let renewal = spawn_started(async move {
        let params = LeaderRenew {
            token,
            ttl_ms: 2_000,
            now: None,
        };
        store.leader_renew(params).await
    })
    .await;
    assert_waits_for(db, &mut stalled, &renewal).await;
    // Renewed or refused, either is fine; waiting for as long as b is stopped is not.
    let answer = within(
        20,
        "a's renewal while a stopped candidate's election transaction is open",
        renewal,
    )
    .await
    .expect("renewal task");
    eprintln!("a's renewal: {answer:?}");
    drop(stalled);
}

/// The leader stops between its renewal's `UPDATE` and the commit; its lease ends. A
/// candidate standing long after that waits for the stalled transaction, with no
/// timeout: the leadership is stuck while the old leader is stopped, however long that
/// is — what the check's idle timeout was added to prevent.
async fn a_leader_stalled_in_its_renewal_does_not_hold_elections_up_for_ever(db: &TestDb) {
    let a = elect(db, "a", 1_000, Some(0)).await;
    let mut stalled = db.store.begin().await.expect("begin");
    let renewed = stalled
        .leader_renew(LeaderRenew {
            token: a.token(),
            ttl_ms: 1_000,
            now: Some(at(500)),
        })
        .await
        .expect("a's renewal");
    assert_eq!(renewed.expires_at, at(1_500));

    let store = db.store.clone();
    let racer = spawn_started(async move {
        store
            .leader_elect(elect_params("b", 1_000, Some(60_000)))
            .await
    })
    .await;
    assert_waits_for(db, &mut stalled, &racer).await;
    let b = within(
        20,
        "b's election a minute after a's lease ended, a stalled in its renewal",
        racer,
    )
    .await
    .expect("election task")
    .expect("leader_elect");
    assert_eq!((b.holder.as_str(), b.fence), ("b", a.fence + 1));
    drop(stalled);
}

/// A leadership of 25 days (a worker's lease; nothing bounds it above) is current, so
/// its check passes. PostgreSQL's check puts 2 160 000 000 ms into
/// `idle_in_transaction_session_timeout`, beyond its `int` range: every check fails with
/// a database error, and the leader's sweeps and purges never run.
async fn a_long_leadership_passes_its_check(db: &TestDb) {
    const DAY_MS: i64 = 24 * 3600 * 1000;
    let a = elect(db, "a", 25 * DAY_MS, Some(0)).await;
    assert!(a.current());
    let mut tx = db.store.begin().await.expect("begin");
    let checked = tx.leader_check(a.token(), Some(at(1_000))).await;
    tx.rollback().await.expect("rollback");
    match checked {
        Ok(()) => {}
        Err(StoreError::LeadershipLost { .. }) => panic!("a leads for 25 days: lost at 1 s"),
        Err(e) => panic!("the check of a current 25-day leadership failed: {e}"),
    }
}

idem_store_tests::store_cases!(a_long_leadership_passes_its_check);

idem_store_tests::postgres_cases!(
    a_stalled_candidate_does_not_hold_the_leader_up_for_ever,
    a_leader_stalled_in_its_renewal_does_not_hold_elections_up_for_ever,
);
