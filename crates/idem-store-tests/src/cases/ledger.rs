//! `ledger_post`, `ledger_verify`, `ledger_repair`: an entry and its account's running
//! total move together; a duplicate entry key changes nothing; verify finds a total that
//! differs from its entries and repair rebuilds it (a dry run first); a claim that is
//! not current cannot post.

use idem_store::{JobLock, JobRow, LedgerPost, LedgerPosted, SqlValue};

use crate::TestDb;
use crate::fixture::{
    assert_waits_for, job_in, pg_gate_after_insert, reclaimed, running, spawn_started, t0,
};
use crate::harness::within;

fn post(job: &JobRow, key: &str, account: &str, amount: i64) -> LedgerPost {
    LedgerPost {
        entry_key: key.into(),
        account: account.into(),
        amount,
        lease: job.lease_token(),
        now: None,
    }
}

async fn balances(db: &TestDb) -> Vec<(String, i64)> {
    let sql = "SELECT account, balance FROM idem_ledger_balance ORDER BY account";
    let rows = db.store.query(sql, &[]).await.expect("balances");
    rows.into_iter()
        .map(|r| match r.as_slice() {
            [SqlValue::Text(a), SqlValue::Int(b)] => (a.clone(), *b),
            other => panic!("unexpected balance row {other:?}"),
        })
        .collect()
}

/// Posts move totals once per entry key; verify finds a corrupted total; repair rebuilds.
pub async fn ledger_posts_once_and_repair_rebuilds(db: &TestDb) {
    let job = running(db, job_in("l1", "transfer"), t0()).await;
    let mut tx = db.store.begin().await.expect("begin");
    for (key, account, amount) in [
        ("e1", "alice", -30),
        ("e2", "alice", -20),
        ("e3", "bob", 50),
    ] {
        assert!(
            tx.ledger_post(post(&job, key, account, amount))
                .await
                .expect("post")
                .is_new()
        );
    }
    match tx
        .ledger_post(post(&job, "e3", "bob", 999))
        .await
        .expect("repeat")
    {
        LedgerPosted::Duplicate(e) => assert_eq!(
            (e.account.as_str(), e.amount, e.job_id),
            ("bob", 50, job.id)
        ),
        LedgerPosted::New => panic!("a second post of e3 must change nothing"),
    }
    let corrupt = "UPDATE idem_ledger_balance SET balance = balance + 5 WHERE account = 'alice'";
    tx.execute(corrupt, &[]).await.expect("corrupt");
    tx.commit().await.expect("commit");
    let found = db.store.ledger_verify().await.expect("verify");
    assert_eq!(found.len(), 1, "{found:?}");
    let m = &found[0];
    assert_eq!(
        (m.account.as_str(), m.balance, m.sum, m.entries),
        ("alice", Some(-45), -50, 2)
    );
    assert_eq!(db.store.ledger_repair(false).await.expect("dry run"), found);
    assert_eq!(
        db.store.ledger_verify().await.expect("verify"),
        found,
        "a dry run writes nothing"
    );
    assert_eq!(db.store.ledger_repair(true).await.expect("repair"), found);
    assert!(db.store.ledger_verify().await.expect("verify").is_empty());
    assert_eq!(
        balances(db).await,
        vec![("alice".into(), -50), ("bob".into(), 50)]
    );
}

/// A claim whose fence is no longer current cannot post: `LeaseLost`, nothing moves.
pub async fn ledger_post_refuses_a_stale_claim(db: &TestDb) {
    let current = reclaimed(db, job_in("l2", "transfer"), t0()).await;
    let stale = JobRow {
        fence: current.fence - 1,
        ..current.clone()
    };
    let mut tx = db.store.begin().await.expect("begin");
    let err = tx
        .ledger_post(post(&stale, "late", "alice", -1))
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    tx.commit().await.expect("commit");
    assert!(balances(db).await.is_empty());
    assert!(db.store.ledger_verify().await.expect("verify").is_empty());
}

/// A repair of an account that waited for a post in flight counts the posted entry: the
/// total it writes is the sum of the entries committed when it holds the account's row,
/// never a sum taken before it waited (which would overwrite the post's move).
pub async fn ledger_repair_counts_a_post_that_commits_while_it_waits(db: &TestDb) {
    let job = running(db, job_in("l3", "transfer"), t0()).await;
    let mut tx = db.store.begin().await.expect("begin");
    tx.ledger_post(post(&job, "r1", "carol", 50))
        .await
        .expect("post");
    let corrupt = "UPDATE idem_ledger_balance SET balance = 0 WHERE account = 'carol'";
    tx.execute(corrupt, &[]).await.expect("corrupt");
    tx.commit().await.expect("commit");
    let found = db.store.ledger_verify().await.expect("verify");
    assert_eq!(found.len(), 1, "{found:?}");
    let mut posting = db.store.begin().await.expect("begin");
    let posted = posting.ledger_post(post(&job, "r2", "carol", 100)).await;
    assert!(posted.expect("post in flight").is_new());
    let store = db.store.clone();
    let repair = spawn_started(async move {
        let mut tx = store.begin().await?;
        tx.ledger_rebuild(found).await?;
        tx.commit().await
    })
    .await;
    assert_waits_for(db, &mut posting, &repair).await;
    posting.commit().await.expect("commit the post");
    let repaired = within(30, "the repair", repair).await.expect("repair task");
    repaired.expect("repair");
    assert!(db.store.ledger_verify().await.expect("verify").is_empty());
    assert_eq!(balances(db).await, vec![("carol".into(), 150)]);
}

/// PostgreSQL: a post whose insert met an existing entry, which was then deleted before
/// the post read it back, inserts its own entry (`New`): a current claim is never
/// answered `LeaseLost`. The gap is held open with a gate.
pub async fn ledger_post_survives_its_entry_deleted_meanwhile(db: &TestDb) {
    let first = running(db, job_in("l4", "transfer"), t0()).await;
    let mut tx = db.store.begin().await.expect("begin");
    tx.ledger_post(post(&first, "d1", "dave", 7))
        .await
        .expect("post");
    tx.commit().await.expect("commit");
    let current = running(db, job_in("l5", "transfer"), t0()).await;
    let mut gate = pg_gate_after_insert(db, "idem_ledger_entry").await;
    let store = db.store.clone();
    let lease = current.lease_token();
    let again = post(&current, "d1", "dave", 7);
    let posting = spawn_started(async move {
        let mut tx = store.begin().await?;
        tx.job_lock(JobLock::of(lease)).await?;
        let posted = tx.ledger_post(again).await?;
        tx.commit().await?;
        Ok::<_, idem_store::StoreError>(posted)
    })
    .await;
    assert_waits_for(db, &mut gate, &posting).await;
    let mut delete = db.store.begin().await.expect("begin");
    let gone = "DELETE FROM idem_ledger_entry WHERE entry_key = 'd1'";
    assert_eq!(delete.execute(gone, &[]).await.expect("delete"), 1);
    let undo = "UPDATE idem_ledger_balance SET balance = balance - 7 WHERE account = 'dave'";
    delete.execute(undo, &[]).await.expect("undo the total");
    delete.commit().await.expect("commit the delete");
    gate.commit().await.expect("open the gate");
    let posted = within(30, "the post", posting).await.expect("post task");
    assert_eq!(
        posted.expect("a current claim is answered"),
        LedgerPosted::New
    );
    assert!(db.store.ledger_verify().await.expect("verify").is_empty());
    assert_eq!(balances(db).await, vec![("dave".into(), 7)]);
}

/// PostgreSQL: a repair that runs between a post's entry insert and its move of the
/// total (the gap held open with a gate) sums the committed entries only and does not
/// wait (the post holds no lock on the total yet); the post then moves the repaired
/// total by its amount. Totals equal their entries afterwards.
pub async fn ledger_repair_between_a_posts_entry_and_its_total(db: &TestDb) {
    let job = running(db, job_in("l6", "transfer"), t0()).await;
    let mut tx = db.store.begin().await.expect("begin");
    tx.ledger_post(post(&job, "g1", "erin", 10))
        .await
        .expect("post");
    let corrupt = "UPDATE idem_ledger_balance SET balance = 0 WHERE account = 'erin'";
    tx.execute(corrupt, &[]).await.expect("corrupt");
    tx.commit().await.expect("commit");
    let found = db.store.ledger_verify().await.expect("verify");
    assert_eq!(found.len(), 1, "{found:?}");
    let mut gate = pg_gate_after_insert(db, "idem_ledger_entry").await;
    let store = db.store.clone();
    let lease = job.lease_token();
    let again = post(&job, "g2", "erin", 5);
    let posting = spawn_started(async move {
        let mut tx = store.begin().await?;
        tx.job_lock(JobLock::of(lease)).await?;
        let posted = tx.ledger_post(again).await?;
        tx.commit().await?;
        Ok::<_, idem_store::StoreError>(posted)
    })
    .await;
    assert_waits_for(db, &mut gate, &posting).await;
    let mut repair = db.store.begin().await.expect("begin");
    within(30, "the repair in the gap", repair.ledger_rebuild(found))
        .await
        .expect("rebuild");
    repair.commit().await.expect("commit the repair");
    gate.commit().await.expect("open the gate");
    let posted = within(30, "the post", posting).await.expect("post task");
    assert_eq!(posted.expect("post"), LedgerPosted::New);
    assert!(db.store.ledger_verify().await.expect("verify").is_empty());
    assert_eq!(balances(db).await, vec![("erin".into(), 15)]);
}
