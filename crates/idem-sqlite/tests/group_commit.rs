//! Group commit: transactions that end while others are coming share one `COMMIT`; a
//! committed transaction hears so only after that `COMMIT`, a failing one undoes only its
//! own writes, and an error that ends SQLite's transaction fails every member.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Waker};
use std::time::Duration;

use idem_sqlite::{SqliteOptions, SqliteStore};
use idem_store::{SqlValue, Store, StoreError};

/// A store whose groups stay open until no transaction is coming (the window is long),
/// so which transactions share a commit is decided by the test, not by time.
async fn store(dir: &tempfile::TempDir, window: Duration) -> SqliteStore {
    let url = format!("sqlite://{}", dir.path().join("group.db").display());
    let options = SqliteOptions {
        group_commit_window: window,
        ..SqliteOptions::default()
    };
    let store = SqliteStore::connect(&url, options).await.expect("connect");
    store.migrate().await.expect("migrate");
    let mut tx = store.begin().await.expect("begin");
    tx.execute("CREATE TABLE t (x INTEGER NOT NULL)", &[])
        .await
        .expect("create");
    tx.commit().await.expect("commit");
    store
}

/// Polls `f` once; `true` if it is still pending.
fn pending<F: Future + ?Sized>(f: Pin<&mut F>) -> bool {
    f.poll(&mut Context::from_waker(Waker::noop())).is_pending()
}

async fn rows(store: &SqliteStore) -> Vec<i64> {
    let rows = store
        .query("SELECT x FROM t ORDER BY x", &[])
        .await
        .expect("read");
    rows.iter().map(|r| r[0].as_i64().expect("int")).collect()
}

type Commit = Pin<Box<dyn Future<Output = idem_store::StoreResult<()>> + Send>>;

/// `a` has written 1 and committed while `b` was asking for the writer: `a` waits for its
/// group's commit, and `b` is open in the same group.
async fn a_waits_for_b(store: &SqliteStore) -> (Commit, Box<dyn idem_store::StoreTx>) {
    let mut a = store.begin().await.expect("begin a");
    insert(&mut a, 1).await;
    let mut b_begin = Box::pin(store.begin());
    assert!(pending(b_begin.as_mut()), "b waits for a");
    let mut a_commit = a.commit();
    assert!(pending(a_commit.as_mut()), "a waits for the group's commit");
    (a_commit, b_begin.await.expect("begin b"))
}

async fn insert(tx: &mut Box<dyn idem_store::StoreTx>, x: i64) {
    tx.execute("INSERT INTO t (x) VALUES ($1)", &[SqlValue::from(x)])
        .await
        .expect("insert");
}

#[tokio::test]
async fn a_commit_waits_for_its_group_and_a_rollback_undoes_only_its_own_writes() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir, Duration::from_secs(600)).await;

    let (mut a_commit, mut b) = a_waits_for_b(&store).await;
    insert(&mut b, 2).await;
    assert_eq!(
        rows(&store).await,
        Vec::<i64>::new(),
        "nothing committed yet"
    );
    assert!(pending(a_commit.as_mut()), "a still waits while b is open");
    b.rollback().await.expect("rollback b");

    a_commit.await.expect("a committed with the group");
    assert_eq!(rows(&store).await, vec![1], "a's row kept, b's undone");
    store.close().await;
}

#[tokio::test]
async fn members_commit_together_and_each_hears_it_after_the_commit() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir, Duration::from_secs(600)).await;

    let (mut a_commit, mut b) = a_waits_for_b(&store).await;
    insert(&mut b, 2).await;
    // A store operation is a member too.
    let pause = idem_store::QueuePause {
        queue: "q".into(),
        by: None,
        now: None,
    };
    let mut c_write = Box::pin(store.queue_pause(pause));
    assert!(pending(c_write.as_mut()), "c waits for b");
    let mut b_commit = Box::pin(b.commit());
    assert!(pending(b_commit.as_mut()), "b waits: c is coming");
    assert!(pending(a_commit.as_mut()));
    assert_eq!(
        rows(&store).await,
        Vec::<i64>::new(),
        "nothing committed yet"
    );

    assert!(store.queue_paused().await.expect("paused").is_empty());
    assert!(c_write.await.expect("c committed"));
    a_commit.await.expect("a committed");
    b_commit.await.expect("b committed");
    assert_eq!(rows(&store).await, vec![1, 2]);
    assert_eq!(store.queue_paused().await.expect("paused").len(), 1);
    store.close().await;
}

#[tokio::test]
async fn a_statement_that_ends_the_transaction_fails_every_member_of_its_group() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir, Duration::from_secs(600)).await;

    let (a_commit, mut b) = a_waits_for_b(&store).await;
    insert(&mut b, 2).await;
    let err = b.execute("ROLLBACK", &[]).await.unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err}");
    let err = a_commit.await.unwrap_err();
    assert!(err.to_string().contains("may or may not"), "{err}");
    assert!(b.commit().await.is_err(), "b's transaction is gone");
    assert_eq!(
        rows(&store).await,
        Vec::<i64>::new(),
        "the ROLLBACK undid both"
    );

    // The next transaction opens a new group.
    let mut c = store.begin().await.expect("begin c");
    insert(&mut c, 3).await;
    c.commit().await.expect("commit c");
    assert_eq!(rows(&store).await, vec![3]);
    store.close().await;
}

#[tokio::test]
async fn a_group_commits_when_the_transaction_it_waited_for_never_comes() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir, Duration::from_millis(20)).await;

    let mut a = store.begin().await.expect("begin a");
    insert(&mut a, 1).await;
    let mut b_begin = Box::pin(store.begin());
    assert!(pending(b_begin.as_mut()));
    let mut a_commit = Box::pin(a.commit());
    assert!(pending(a_commit.as_mut()), "a waits: b is coming");
    drop(b_begin); // b gives up before it gets the writer

    tokio::time::timeout(Duration::from_secs(30), a_commit)
        .await
        .expect("the writer committed the group after its window")
        .expect("a committed");
    assert_eq!(rows(&store).await, vec![1]);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transactions_keep_what_they_committed_and_nothing_they_rolled_back() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir, Duration::from_millis(2)).await;

    let mut tasks = tokio::task::JoinSet::new();
    for x in 0..400_i64 {
        let store = store.clone();
        tasks.spawn(async move {
            let mut tx = store.begin().await.expect("begin");
            insert(&mut tx, x).await;
            if x % 3 == 0 {
                tx.rollback().await.expect("rollback");
                return None;
            }
            if x % 5 == 0 {
                drop(tx);
                return None;
            }
            tx.commit().await.expect("commit");
            Some(x)
        });
    }
    let mut committed = Vec::new();
    while let Some(done) = tasks.join_next().await {
        committed.extend(done.expect("task"));
    }
    committed.sort_unstable();
    assert_eq!(rows(&store).await, committed);
    store.close().await;
}
