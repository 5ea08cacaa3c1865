//! Helpers for the group-commit tests: a store whose groups stay open until no
//! transaction is coming, and two transactions sharing one group.
#![allow(dead_code)] // each test file uses its own part

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Waker};
use std::time::Duration;

use idem_sqlite::{SqliteOptions, SqliteStore};
use idem_store::{SqlValue, Store, StoreTx};

pub type Tx = Box<dyn StoreTx>;
pub type Commit = Pin<Box<dyn Future<Output = idem_store::StoreResult<()>> + Send>>;

/// A store on `dir`'s database file whose groups stay open for `window` unless no
/// transaction is coming, so which transactions share a commit is decided by the test.
pub async fn open(dir: &tempfile::TempDir, window: Duration) -> SqliteStore {
    let url = format!("sqlite://{}", dir.path().join("group.db").display());
    let options = SqliteOptions {
        group_commit_window: window,
        ..SqliteOptions::default()
    };
    SqliteStore::connect(&url, options).await.expect("connect")
}

/// [`open`], migrated, with table `t` and whatever `setup` creates, committed.
pub async fn store(dir: &tempfile::TempDir, window: Duration, setup: &[&str]) -> SqliteStore {
    let store = open(dir, window).await;
    store.migrate().await.expect("migrate");
    let mut tx = store.begin().await.expect("begin");
    for sql in ["CREATE TABLE t (x INTEGER NOT NULL)"].iter().chain(setup) {
        tx.execute(sql, &[]).await.expect(sql);
    }
    tx.commit().await.expect("commit");
    store
}

/// Polls `f` once; `true` if it is still pending.
pub fn pending<F: Future + ?Sized>(f: Pin<&mut F>) -> bool {
    f.poll(&mut Context::from_waker(Waker::noop())).is_pending()
}

pub async fn rows(store: &SqliteStore) -> Vec<i64> {
    let rows = store
        .query("SELECT x FROM t ORDER BY x", &[])
        .await
        .expect("read");
    rows.iter().map(|r| r[0].as_i64().expect("int")).collect()
}

/// `a` has written 1 and committed while `b` was asking for the writer: `a` waits for its
/// group's commit, and `b` is open in the same group.
pub async fn a_waits_for_b(store: &SqliteStore) -> (Commit, Tx) {
    let mut a = store.begin().await.expect("begin a");
    insert(&mut a, 1).await;
    let mut b_begin = Box::pin(store.begin());
    assert!(pending(b_begin.as_mut()), "b waits for a");
    let mut a_commit = a.commit();
    assert!(pending(a_commit.as_mut()), "a waits for the group's commit");
    (a_commit, b_begin.await.expect("begin b"))
}

pub async fn insert(tx: &mut Tx, x: i64) {
    tx.execute("INSERT INTO t (x) VALUES ($1)", &[SqlValue::from(x)])
        .await
        .expect("insert");
}
