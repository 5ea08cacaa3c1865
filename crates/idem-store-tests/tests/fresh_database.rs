//! Rules that need a database idem has never migrated, or none at all, which `TestDb`
//! does not hand out: several processes starting at once on a fresh database all succeed,
//! exactly one of them applies the migrations, and none applies anything afterwards; a
//! store opening an existing database creates none where there is none.

use std::sync::Arc;

use idem_postgres::{PgOptions, PgStore};
use idem_sqlite::{SqliteOptions, SqliteStore};
use idem_store::{SqlValue, Store, StoreError};
use idem_store_tests::TestDb;
use idem_store_tests::harness::{PG_URL_ENV, within};

/// Migrates `stores` concurrently; returns how many migrations each applied.
async fn migrate_all(stores: &[Arc<dyn Store>]) -> Vec<usize> {
    let tasks: Vec<_> = stores
        .iter()
        .map(|s| {
            let s = s.clone();
            tokio::spawn(async move { s.migrate().await })
        })
        .collect();
    let mut applied = Vec::new();
    for task in tasks {
        let result = within(60, "a concurrent migrate", task)
            .await
            .expect("migrate task");
        applied.push(result.unwrap_or_else(|e| panic!("concurrent migrate failed: {e}")));
    }
    applied
}

/// One migrator applied everything, the others nothing, and a later run nothing.
async fn check_one_winner(stores: &[Arc<dyn Store>]) {
    let mut applied = migrate_all(stores).await;
    applied.sort_unstable();
    let total = *applied.last().expect("a migrator");
    assert!(total >= 1, "nothing was migrated: {applied:?}");
    assert_eq!(
        total,
        idem_store::migration::COUNT,
        "the winner applies every migration: {applied:?}"
    );
    assert!(
        applied[..applied.len() - 1].iter().all(|n| *n == 0),
        "{applied:?}"
    );
    assert_eq!(migrate_all(stores).await, vec![0; stores.len()]);
    let rows = stores[0]
        .query("SELECT count(*) FROM idem_migration", &[])
        .await;
    let count = rows.expect("idem_migration")[0][0].as_i64();
    assert_eq!(count, Some(total as i64), "each migration recorded once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_concurrent_first_migrations() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("fresh.db").display());
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..4 {
        let store = SqliteStore::connect(&url, SqliteOptions::default()).await;
        stores.push(Arc::new(store.expect("open")));
    }
    check_one_winner(&stores).await;
    for s in &stores {
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_concurrent_first_migrations() {
    // TestDb::postgres applies the skip / CI rules; its own schema is not used.
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let base = std::env::var(PG_URL_ENV).expect("set, since TestDb::postgres ran");
    let schema = format!("idem_test_{:016x}_fresh", rand::random::<u64>());
    let connects = (0..4).map(|_| {
        let options = PgOptions {
            schema: Some(schema.clone()),
            max_connections: 2,
            ..PgOptions::default()
        };
        let base = base.clone();
        tokio::spawn(async move { PgStore::connect(&base, options).await })
    });
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for task in connects.collect::<Vec<_>>() {
        let store = within(60, "a concurrent connect", task)
            .await
            .expect("connect task");
        stores.push(Arc::new(
            store.unwrap_or_else(|e| panic!("concurrent connect: {e}")),
        ));
    }
    check_one_winner(&stores).await;
    let mut tx = stores[0].begin().await.expect("begin");
    tx.execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"), &[])
        .await
        .expect("drop schema");
    tx.commit().await.expect("commit");
    for s in &stores {
        s.close().await;
    }
    db.cleanup().await;
}

#[tokio::test]
async fn sqlite_open_existing_of_a_missing_file_is_not_found_and_creates_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("typo.db").display());
    match SqliteStore::open_existing(&url, SqliteOptions::default()).await {
        Err(StoreError::NotFound { what }) => assert!(what.contains("typo.db"), "{what}"),
        other => panic!("expected NotFound naming typo.db, got {other:?}"),
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read dir").collect();
    assert!(left.is_empty(), "open_existing created {left:?}");
}

#[tokio::test]
async fn postgres_open_existing_creates_no_schema_and_names_a_missing_database() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let base = std::env::var(PG_URL_ENV).expect("set, since TestDb::postgres ran");
    let schema = format!("idem_test_{:016x}_absent", rand::random::<u64>());
    let options = PgOptions {
        schema: Some(schema.clone()),
        ..PgOptions::default()
    };
    match PgStore::open_existing(&base, options).await {
        Err(StoreError::NotFound { what }) => assert!(what.contains(&schema), "{what}"),
        other => panic!("expected NotFound naming {schema}, got {other:?}"),
    }
    let sql = "SELECT count(*) FROM pg_namespace WHERE nspname = $1";
    let rows = db
        .store
        .query(sql, &[SqlValue::from(schema.as_str())])
        .await;
    assert_eq!(
        rows.expect("count")[0][0].as_i64(),
        Some(0),
        "schema created"
    );
    // The query string stays (`pooler=transaction` behind PgBouncer).
    let (url, query) = base.split_once('?').unwrap_or((&base, ""));
    let (server, _) = url.rsplit_once('/').expect("a db");
    let sep = if query.is_empty() { "" } else { "?" };
    let missing = format!(
        "{server}/idem_no_such_database_{:08x}{sep}{query}",
        rand::random::<u32>()
    );
    match PgStore::open_existing(&missing, PgOptions::default()).await {
        Err(StoreError::NotFound { what }) => assert!(what.contains("idem_no_such"), "{what}"),
        other => panic!("expected NotFound naming the database, got {other:?}"),
    }
    db.cleanup().await;
}
