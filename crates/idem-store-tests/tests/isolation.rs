//! idem's PostgreSQL statements are written for READ COMMITTED: a statement that waited
//! for a row lock re-checks its `WHERE` against the row's latest version. A server, role,
//! database or URL whose default isolation is stricter must not change what they do:
//! every connection pins its session to READ COMMITTED and every transaction says so in
//! its `BEGIN`. Here the URL asks for REPEATABLE READ and for SERIALIZABLE, and the races
//! that depend on the re-check still end as the conformance suite says.

use idem_store::testing::{PgUrlChoice, pg_url_from_env};
use idem_store_tests::TestDb;
use idem_store_tests::cases::{job_cancel, job_lease, purge};

/// `SHOW transaction_isolation` on the pool (a statement in its own transaction) and in
/// a transaction idem opened.
async fn isolation(db: &TestDb) -> [String; 2] {
    let sql = "SHOW transaction_isolation";
    let text = |rows: Vec<Vec<idem_store::SqlValue>>| rows[0][0].as_str().unwrap().to_owned();
    let alone = text(db.store.query(sql, &[]).await.expect("show"));
    let mut tx = db.store.begin().await.expect("begin");
    let inside = text(tx.query(sql, &[]).await.expect("show in a transaction"));
    tx.rollback().await.expect("rollback");
    [alone, inside]
}

async fn with_default(level: &str) {
    let base = match pg_url_from_env() {
        PgUrlChoice::Use(url) => url,
        PgUrlChoice::Skip(notice) => return eprintln!("{notice}"),
        PgUrlChoice::Fail(why) => panic!("{why}"),
    };
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options[default_transaction_isolation]={level}");
    // Each race on a schema of its own, as the conformance suite runs it (a job one case
    // leaves claimable must not be what the next one claims).
    let db = TestDb::postgres_at(&url).await;
    assert_eq!(isolation(&db).await, ["read committed", "read committed"]);
    job_lease::lock_sees_a_concurrent_rescue(&db).await;
    db.cleanup().await;
    let db = TestDb::postgres_at(&url).await;
    job_cancel::cancel_waits_for_a_concurrent_claim(&db).await;
    db.cleanup().await;
    let db = TestDb::postgres_at(&url).await;
    purge::purge_spares_a_dead_job_retried_meanwhile(&db).await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeatable_read_default_changes_nothing() {
    with_default("repeatable%20read").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serializable_default_changes_nothing() {
    with_default("serializable").await;
}
