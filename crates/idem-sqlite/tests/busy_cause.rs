//! A busy error names its cause: when another idem process holds the file's write lock
//! (here a child process running this test binary, holding an open transaction), a
//! write that gives up after the busy timeout says so and names that process, instead of
//! the advice for a handler writing around its own transaction (`lib.rs`'s busy test
//! keeps that case).

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

use idem_sqlite::{SqliteOptions, SqliteStore};
use idem_store::{SqlValue, Store, StoreError};

/// Where the child finds the database it holds the lock of.
const HOLD_ENV: &str = "IDEM_TEST_HOLD_WRITE_LOCK";
const HOLDING: &str = "holding the write lock";

async fn open(path: &std::path::Path, busy: Duration) -> SqliteStore {
    let options = SqliteOptions {
        busy_timeout: busy,
        ..SqliteOptions::default()
    };
    let url = format!("sqlite://{}", path.display());
    SqliteStore::connect(&url, options).await.expect("connect")
}

/// Not a test of its own: the child process of the test below. It opens the database
/// named by the environment, writes in a transaction it keeps open, says so on stdout,
/// and rolls back when its stdin closes.
#[tokio::test]
#[ignore = "the child process of a_write_blocked_by_another_process_names_it"]
async fn child_holds_the_write_lock() {
    let Some(path) = std::env::var_os(HOLD_ENV) else {
        return;
    };
    let store = open(std::path::Path::new(&path), Duration::from_secs(10)).await;
    let mut tx = store.begin().await.expect("begin");
    tx.execute("INSERT INTO t (x) VALUES ($1)", &[SqlValue::from(1)])
        .await
        .expect("insert");
    println!("{HOLDING}");
    let _ = tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new())).await;
    tx.rollback().await.expect("rollback");
    store.close().await;
}

#[tokio::test]
async fn a_write_blocked_by_another_process_names_it() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("cause.db");
    let store = open(&db, Duration::from_millis(300)).await;
    store.migrate().await.expect("migrate");
    let mut tx = store.begin().await.expect("begin");
    tx.execute("CREATE TABLE t (x INTEGER NOT NULL)", &[])
        .await
        .expect("create t");
    tx.commit().await.expect("commit");

    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "child_holds_the_write_lock",
            "--ignored",
            "--nocapture",
        ])
        .env(HOLD_ENV, &db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let held = lines.by_ref().map_while(Result::ok).any(|l| l == HOLDING);
    assert!(held, "the child never held the lock");

    let mut tx = store.begin().await.expect("begin");
    let refused = tx
        .execute("INSERT INTO t (x) VALUES ($1)", &[SqlValue::from(2)])
        .await;
    let Err(StoreError::Busy(msg)) = refused else {
        panic!("busy while the child holds the lock: {refused:?}");
    };
    assert!(
        msg.contains(&format!("another process (process {})", child.id())),
        "the error names the child: {msg}"
    );
    assert!(
        !msg.contains("write through that transaction"),
        "not the advice for a handler's own transaction: {msg}"
    );
    drop(tx);

    drop(child.stdin.take()); // the child rolls back and exits
    assert!(child.wait().expect("wait").success(), "the child failed");
    let mut tx = store.begin().await.expect("begin");
    tx.execute("INSERT INTO t (x) VALUES ($1)", &[SqlValue::from(3)])
        .await
        .expect("written once the child let go");
    tx.commit().await.expect("commit");
    store.close().await;
}
