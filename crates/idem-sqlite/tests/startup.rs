//! Starting against an up-to-date schema: `migrate` reads the recorded migrations and
//! takes no write lock when none is pending, so a worker or client starting beside busy
//! writers (other processes holding the file's write lock) does not wait for them.

use std::time::Duration;

use idem_sqlite::{SqliteOptions, SqliteStore};
use idem_store::Store;
use rusqlite::Connection;

#[tokio::test]
async fn migrating_an_up_to_date_schema_takes_no_write_lock() {
    let dir = tempfile::tempdir().expect("dir");
    let url = format!("sqlite://{}", dir.path().join("up.db").display());
    let options = SqliteOptions {
        busy_timeout: Duration::from_millis(300),
        ..SqliteOptions::default()
    };
    let first = SqliteStore::connect(&url, options.clone())
        .await
        .expect("connect");
    assert!(
        first.migrate().await.expect("migrate") > 0,
        "a new file migrates"
    );
    first.close().await;

    // Another process holds the write lock while a second process starts.
    let other = Connection::open(dir.path().join("up.db")).expect("open");
    other.execute_batch("BEGIN IMMEDIATE").expect("lock");
    let second = SqliteStore::connect(&url, options).await.expect("connect");
    let started = second.migrate().await;
    assert_eq!(
        started.expect("an up-to-date schema starts without the write lock"),
        0
    );
    other.execute_batch("ROLLBACK").expect("release");
    second.close().await;
}
