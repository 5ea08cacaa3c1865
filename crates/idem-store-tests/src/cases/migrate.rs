//! Migrations: one entry point, idempotent, idem's own migrations table, and a refusal of
//! a schema newer than the build.

use idem_store::{SqlValue, StoreError};

use crate::TestDb;

/// A second (and third) `migrate()` on a migrated database applies nothing.
pub async fn migrate_is_idempotent(db: &TestDb) {
    assert_eq!(db.store.migrate().await.expect("second migrate"), 0);
    assert_eq!(db.store.migrate().await.expect("third migrate"), 0);
}

/// The job tables exist and are empty; `idem_migration` records versions 1, 2, … with
/// no gap.
pub async fn migrate_creates_the_tables(db: &TestDb) {
    for table in ["idem_job", "idem_job_attempt"] {
        let rows = db
            .store
            .query(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap_or_else(|e| panic!("table {table} after migrate: {e}"));
        assert_eq!(rows, vec![vec![SqlValue::Int(0)]], "{table} starts empty");
    }
    let versions = db
        .store
        .query("SELECT version FROM idem_migration ORDER BY version", &[])
        .await
        .expect("idem_migration after migrate");
    let versions: Vec<i64> = versions
        .iter()
        .map(|r| r[0].as_i64().expect("int"))
        .collect();
    let expected: Vec<i64> = idem_store::migration::NAMES
        .iter()
        .map(|(v, _)| *v)
        .collect();
    assert!(!versions.is_empty(), "no migration recorded");
    assert_eq!(
        versions, expected,
        "recorded migration versions: every one of this build"
    );
}

/// A database that records a migration this build does not know is refused with
/// [`StoreError::Migration`], and nothing else changes.
pub async fn migrate_refuses_a_newer_schema(db: &TestDb) {
    let mut tx = db.store.begin().await.expect("begin");
    // Copy row 1 so the insert needs no knowledge of the dialect's column types.
    let sql = "INSERT INTO idem_migration (version, name, applied_at) \
               SELECT 9999, 'from_the_future', applied_at FROM idem_migration WHERE version = 1";
    assert_eq!(tx.execute(sql, &[]).await.expect("insert version 9999"), 1);
    tx.commit().await.expect("commit");
    match db.store.migrate().await {
        Err(StoreError::Migration(msg)) => assert!(msg.contains("9999"), "{msg}"),
        other => panic!("expected Migration error naming version 9999, got {other:?}"),
    }
}
