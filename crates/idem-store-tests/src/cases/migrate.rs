//! Migrations: one entry point, idempotent, idem's own migrations table, and a refusal of
//! a schema newer than the build; the schema's status, read without writing anything.

use idem_store::migration::{COUNT, NAMES, SchemaStatus};
use idem_store::{Backend, SqlValue, StoreError};

use crate::{TestDb, open_existing_store};

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
/// [`StoreError::SchemaNotCurrent`], and nothing else changes.
pub async fn migrate_refuses_a_newer_schema(db: &TestDb) {
    record_version_9999(db).await;
    match db.store.migrate().await {
        Err(StoreError::SchemaNotCurrent(msg)) => assert!(msg.contains("9999"), "{msg}"),
        other => panic!("expected SchemaNotCurrent naming version 9999, got {other:?}"),
    }
}

/// Records a migration 9999 (`from_the_future`), as a newer idem would have.
async fn record_version_9999(db: &TestDb) {
    // Copy row 1 so the insert needs no knowledge of the dialect's column types.
    let sql = "INSERT INTO idem_migration (version, name, applied_at) \
               SELECT 9999, 'from_the_future', applied_at FROM idem_migration WHERE version = 1";
    run(db, sql).await;
}

async fn run(db: &TestDb, sql: &str) {
    let mut tx = db.store.begin().await.expect("begin");
    tx.execute(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    tx.commit().await.expect("commit");
}

async fn status(db: &TestDb) -> SchemaStatus {
    db.store.schema_status().await.expect("schema_status")
}

fn versions(list: &[idem_store::migration::SchemaMigration]) -> Vec<i64> {
    list.iter().map(|m| m.version).collect()
}

/// A migrated database: every migration of this build applied, with its name and time;
/// nothing pending, nothing newer.
pub async fn schema_status_of_a_migrated_database_is_current(db: &TestDb) {
    let s = status(db).await;
    let names: Vec<(i64, &str)> = s.applied.iter().map(|m| (m.version, &*m.name)).collect();
    assert_eq!(names, NAMES.to_vec());
    assert!(s.applied.iter().all(|m| m.applied_at.is_some()), "{s:?}");
    assert!(s.pending.is_empty() && s.newer.is_empty(), "{s:?}");
    assert!(s.is_current());
    s.require_current().expect("current");
}

/// A database an older build migrated (its last two migrations not recorded) lists them
/// as pending, and reading the status changes nothing.
pub async fn schema_status_lists_what_an_older_database_lacks(db: &TestDb) {
    let older = COUNT as i64 - 1;
    run(
        db,
        &format!("DELETE FROM idem_migration WHERE version >= {older}"),
    )
    .await;
    let s = status(db).await;
    assert_eq!(versions(&s.pending), vec![older, older + 1]);
    assert!(s.pending.iter().all(|m| m.applied_at.is_none()), "{s:?}");
    assert_eq!(versions(&s.applied), (1..older).collect::<Vec<_>>());
    let err = s.require_current().expect_err("older schema");
    let msg = err.to_string();
    assert!(matches!(err, StoreError::SchemaNotCurrent(_)), "{err:?}");
    assert!(msg.contains(&s.pending[0].to_string()), "{msg}");
    assert_eq!(status(db).await, s, "a second read sees the same");
}

/// A database without idem's migrations table has every migration pending, and reading
/// the status does not create the table.
pub async fn schema_status_of_a_database_without_idem_has_all_pending(db: &TestDb) {
    run(db, "DROP TABLE idem_migration").await;
    let s = status(db).await;
    assert!(s.applied.is_empty() && s.newer.is_empty(), "{s:?}");
    assert_eq!(s.pending.len(), COUNT);
    assert!(!s.is_current());
    let left = db
        .store
        .query("SELECT count(*) FROM idem_migration", &[])
        .await;
    assert!(
        left.is_err(),
        "schema_status created idem_migration: {left:?}"
    );
}

/// A migration this build does not know is reported as newer, and refused.
pub async fn schema_status_reports_a_newer_schema(db: &TestDb) {
    record_version_9999(db).await;
    let s = status(db).await;
    assert_eq!(versions(&s.newer), vec![9999]);
    assert_eq!(s.newer[0].name, "from_the_future");
    assert!(s.pending.is_empty() && !s.is_current(), "{s:?}");
    let msg = s.require_current().expect_err("newer schema").to_string();
    assert!(
        msg.contains("9999") && msg.contains("upgrade idem"),
        "{msg}"
    );
}

/// A store opened with `open_existing` on a read-only connection (SQLite `mode=ro`, a
/// PostgreSQL session with `default_transaction_read_only`) reads the status and the
/// jobs: opening wrote nothing.
pub async fn schema_status_reads_in_a_read_only_session(db: &TestDb) {
    let sep = if db.url.contains('?') { '&' } else { '?' };
    let read_only = match db.backend {
        Backend::Sqlite => format!("{}{sep}mode=ro", db.url),
        Backend::Postgres => format!(
            "{}{sep}options=-c%20default_transaction_read_only%3Don",
            db.url
        ),
    };
    let store = open_existing_store(&read_only)
        .await
        .expect("open_existing on a read-only connection");
    let s = store
        .schema_status()
        .await
        .expect("schema_status read-only");
    assert!(s.is_current(), "{s:?}");
    store.queue_counts().await.expect("a read");
    let mut tx = store.begin().await.expect("begin");
    let write = tx.execute("DELETE FROM idem_job", &[]).await;
    assert!(write.is_err(), "the connection is not read-only");
    drop(tx);
    store.close().await;
}
