//! The store's busy handler: a write that finds the database's write lock held by
//! another connection (another process, here a connection of the test's own) waits for
//! it up to the busy timeout, goes on when it is released, and fails `Busy` after the
//! timeout, not before.

use std::time::{Duration, Instant};

use idem_sqlite::{SqliteOptions, SqliteStore};
use idem_store::{SqlValue, Store, StoreError};
use rusqlite::Connection;

/// A migrated store on `dir`'s file with table `t`, waiting at most `busy` for the lock.
async fn store(dir: &tempfile::TempDir, busy: Duration) -> SqliteStore {
    let url = format!("sqlite://{}", dir.path().join("busy.db").display());
    let options = SqliteOptions {
        busy_timeout: busy,
        ..SqliteOptions::default()
    };
    let store = SqliteStore::connect(&url, options).await.expect("connect");
    store.migrate().await.expect("migrate");
    let mut tx = store.begin().await.expect("begin");
    tx.execute("CREATE TABLE t (x INTEGER NOT NULL)", &[])
        .await
        .expect("create t");
    tx.commit().await.expect("commit");
    store
}

/// Another connection to the same file holding the write lock.
fn hold_lock(dir: &tempfile::TempDir) -> Connection {
    let c = Connection::open(dir.path().join("busy.db")).expect("open");
    c.execute_batch("BEGIN IMMEDIATE").expect("lock");
    c
}

/// Inserts `x` in a transaction of its own.
async fn write(store: &SqliteStore, x: i64) -> idem_store::StoreResult<()> {
    let mut tx = store.begin().await?;
    tx.execute("INSERT INTO t (x) VALUES ($1)", &[SqlValue::from(x)])
        .await?;
    tx.commit().await
}

// One test, in sequence: the count of waits is process-wide, so a second test waiting in
// parallel could let the release below happen before this write began to wait.
#[tokio::test]
async fn a_write_waits_for_a_lock_held_elsewhere_and_fails_busy_only_after_the_timeout() {
    a_write_fails_busy_only_after_the_busy_timeout().await;
    a_waiting_write_goes_on_when_the_lock_is_released().await;
}

async fn a_write_fails_busy_only_after_the_busy_timeout() {
    let dir = tempfile::tempdir().expect("dir");
    let timeout = Duration::from_millis(300);
    let store = store(&dir, timeout).await;
    let other = hold_lock(&dir);

    let started = Instant::now();
    let refused = write(&store, 1).await;
    let waited = started.elapsed();
    assert!(
        matches!(refused, Err(StoreError::Busy(_))),
        "busy while another connection holds the lock: {refused:?}"
    );
    assert!(
        waited >= timeout,
        "gave up after {waited:?}, before {timeout:?}"
    );

    other.execute_batch("COMMIT").expect("release");
    write(&store, 2).await.expect("the lock is free again");
    store.close().await;
}

async fn a_waiting_write_goes_on_when_the_lock_is_released() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir, Duration::from_secs(60)).await;
    let other = hold_lock(&dir);

    let before = idem_sqlite::busy_waits();
    let waiting = tokio::spawn({
        let store = store.clone();
        async move { write(&store, 1).await }
    });
    // Released only once the write has found the lock held and begun to wait.
    while idem_sqlite::busy_waits() == before {
        assert!(!waiting.is_finished(), "the write ended without waiting");
        tokio::task::yield_now().await;
    }
    other.execute_batch("COMMIT").expect("release");
    waiting
        .await
        .expect("join")
        .expect("written once the lock was free");
    let rows = store.query("SELECT x FROM t", &[]).await.expect("read");
    assert_eq!(rows.len(), 1);
    store.close().await;
}
