//! Attacks on SQLite group commit (issue 15): a caller must hear "committed" only for
//! writes that were kept, "failed" only for writes that were not, and a transaction its
//! caller abandoned must not keep the file's write lock.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use common::{Tx, a_waits_for_b, insert, pending, rows};
use idem_sqlite::rusqlite as rusqlite_conn;
use idem_sqlite::{SqliteStore, SqliteTx};
use idem_store::{Store, StoreError};

const WINDOW: Duration = Duration::from_secs(600);

async fn open(dir: &tempfile::TempDir) -> SqliteStore {
    common::open(dir, WINDOW).await
}

/// [`common::store`] with a `u` whose unique conflicts roll back the whole transaction
/// and a `v` whose trigger does the same.
async fn store(dir: &tempfile::TempDir) -> SqliteStore {
    let setup = [
        "CREATE TABLE u (x INTEGER UNIQUE ON CONFLICT ROLLBACK)",
        "INSERT INTO u (x) VALUES (1)",
        "CREATE TABLE v (x INTEGER)",
        "CREATE TRIGGER v_no BEFORE INSERT ON v BEGIN SELECT RAISE(ROLLBACK, 'no'); END",
    ];
    common::store(dir, WINDOW, &setup).await
}

fn sqlite(tx: &mut Tx) -> &mut SqliteTx {
    tx.as_any_mut()
        .downcast_mut()
        .expect("an SQLite transaction")
}

/// Runs `poison` in `b` after `b` wrote 2, in the group `a` waits on, then ends `b`;
/// returns what `a` and `b` heard and which rows a fresh store finds in `t`.
async fn poisoned(
    poison: impl FnOnce(&rusqlite_conn::Connection) -> rusqlite_conn::Result<()> + Send + 'static,
) -> (bool, bool, Vec<i64>) {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir).await;
    let (a_commit, mut b) = a_waits_for_b(&store).await;
    insert(&mut b, 2).await;
    let poisoned = sqlite(&mut b).with_connection(poison).await;
    let b_ok = match poisoned {
        Ok(()) => b.commit().await.is_ok(),
        Err(_) => {
            b.rollback().await.expect("rollback b");
            false
        }
    };
    let a_ok = a_commit.await.is_ok();
    // A later transaction commits on its own.
    let mut c = store.begin().await.expect("begin c");
    insert(&mut c, 3).await;
    c.commit().await.expect("c commits after the poison");
    store.close().await;
    let fresh = open(&dir).await;
    let kept = rows(&fresh).await;
    fresh.close().await;
    (a_ok, b_ok, kept)
}

/// What `a` heard matches whether its row was kept; `b` failed and kept nothing.
fn told_the_truth((a_ok, b_ok, kept): (bool, bool, Vec<i64>)) {
    assert!(!b_ok, "b's statement failed");
    assert!(!kept.contains(&2), "b's row is not kept: {kept:?}");
    assert_eq!(a_ok, kept.contains(&1), "a heard {a_ok}, rows {kept:?}");
    assert!(kept.contains(&3), "the next transaction commits: {kept:?}");
}

#[tokio::test]
async fn a_unique_conflict_that_rolls_back_the_transaction_tells_each_member_the_truth() {
    let outcome = poisoned(|c| c.execute("INSERT INTO u (x) VALUES (1)", []).map(drop)).await;
    assert!(!outcome.0, "SQLite rolled back a's writes with the group");
    told_the_truth(outcome);
}

#[tokio::test]
async fn a_trigger_raising_rollback_tells_each_member_the_truth() {
    let outcome = poisoned(|c| c.execute("INSERT INTO v (x) VALUES (1)", []).map(drop)).await;
    assert!(!outcome.0, "SQLite rolled back a's writes with the group");
    told_the_truth(outcome);
}

#[tokio::test]
async fn an_interrupted_write_tells_each_member_the_truth() {
    let outcome = poisoned(|c| {
        // The statement interrupts itself on its first row: a signal, not a timer.
        let handle = c.get_interrupt_handle();
        c.create_scalar_function("stop", 0, Default::default(), move |_| {
            handle.interrupt();
            Ok(0)
        })?;
        c.execute(
            "INSERT INTO t (x) WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n \
             WHERE i < 100000) SELECT 100 + stop() + i FROM n",
            [],
        )
        .map(drop)
    })
    .await;
    told_the_truth(outcome);
}

#[tokio::test]
async fn a_full_database_fails_only_the_member_that_filled_it() {
    let outcome = poisoned(|c| {
        let pages: i64 = c.query_row("PRAGMA page_count", [], |r| r.get(0))?;
        c.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))?;
        let full = c.execute("INSERT INTO t (x) SELECT zeroblob(1000000)", []);
        c.query_row("PRAGMA max_page_count = 4294967294", [], |_| Ok(()))?;
        full.map(drop)
    })
    .await;
    assert!(
        outcome.0,
        "a statement-level error leaves a's writes in the group"
    );
    told_the_truth(outcome);
}

/// A caller that swallows an error which ended SQLite's transaction, and writes on: the
/// later statements run outside any transaction, and `b` must not hear "failed" for
/// writes SQLite kept.
#[tokio::test]
async fn writes_after_a_swallowed_rollback_are_not_kept_when_the_caller_hears_failed() {
    let outcome = poisoned(|c| {
        let _ = c.execute("INSERT INTO u (x) VALUES (1)", []);
        c.execute("INSERT INTO t (x) VALUES (2)", []).map(drop)
    })
    .await;
    assert!(!outcome.0, "SQLite rolled back a's writes with the group");
    told_the_truth(outcome);
}

/// Two stores on one file. `s1`'s transaction is dropped while its first statement runs
/// on the writer thread: nothing may keep the file's write lock for a transaction no one
/// will end, and its write is not kept.
#[tokio::test]
async fn a_transaction_dropped_while_its_first_statement_runs_does_not_keep_the_file_lock() {
    let dir = tempfile::tempdir().expect("dir");
    let s1 = store(&dir).await;
    let s2 = open(&dir).await;

    let (started, started_rx) = tokio::sync::oneshot::channel();
    let (go, go_rx) = std::sync::mpsc::channel::<()>();
    let mut dropped = s1.begin().await.expect("begin on s1");
    {
        let first = sqlite(&mut dropped).with_connection(move |c| {
            c.execute("INSERT INTO t (x) VALUES (10)", [])?;
            let _ = started.send(());
            let _ = go_rx.recv(); // holds the writer thread until the caller has left
            Ok(())
        });
        tokio::select! {
            _ = first => panic!("the statement waits for go"),
            _ = started_rx => {}
        }
    }
    drop(dropped);
    go.send(()).expect("the statement waits");

    let mut next = s2.begin().await.expect("begin on s2");
    insert(&mut next, 2).await;
    next.commit()
        .await
        .expect("s2 writes: s1 let go of the lock");
    assert_eq!(rows(&s2).await, vec![2], "the dropped write is not kept");
    s1.close().await;
    s2.close().await;
}

/// A panic in a transaction's first statement (run on the writer thread) must not leave
/// its savepoint holding the file's write lock.
#[tokio::test]
async fn a_panic_in_a_first_statement_does_not_keep_the_file_lock() {
    let dir = tempfile::tempdir().expect("dir");
    let s1 = store(&dir).await;
    let s2 = open(&dir).await;
    let mut tx = s1.begin().await.expect("begin");
    let err = sqlite(&mut tx)
        .with_connection(|c| -> rusqlite_conn::Result<()> {
            c.execute("INSERT INTO t (x) VALUES (10)", [])?;
            panic!("a caller's closure panics")
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("panicked"), "{err}");
    drop(tx);

    let mut other = s2.begin().await.expect("begin on s2");
    insert(&mut other, 2).await;
    other
        .commit()
        .await
        .expect("s2 writes: s1 let go of the lock");
    assert_eq!(rows(&s2).await, vec![2], "the panicked write is not kept");
    s1.close().await;
    s2.close().await;
}

/// A panic in a later statement (run on the caller's thread) rolls back that
/// transaction only; the member waiting on the group still commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_an_inline_statement_undoes_only_that_transaction() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir).await;
    let (a_commit, mut b) = a_waits_for_b(&store).await;
    insert(&mut b, 2).await;
    let panicked = tokio::spawn(async move {
        sqlite(&mut b)
            .with_connection(|_| -> rusqlite_conn::Result<()> { panic!("inline panic") })
            .await
    })
    .await;
    assert!(panicked.unwrap_err().is_panic());
    a_commit.await.expect("a commits");
    let mut c = store.begin().await.expect("begin c");
    insert(&mut c, 3).await;
    c.commit().await.expect("commit c");
    assert_eq!(rows(&store).await, vec![1, 3]);
    store.close().await;
}

type Begin<'a> = Pin<Box<dyn Future<Output = idem_store::StoreResult<Tx>> + Send + 'a>>;

/// `a` wrote 1 and committed while another transaction was asking for the writer: `a`
/// waits for a group that transaction has not joined.
async fn a_waits_for_one_asking(store: &SqliteStore) -> (common::Commit, Begin<'_>) {
    let mut a = store.begin().await.expect("begin a");
    insert(&mut a, 1).await;
    let mut asking = Box::pin(store.begin());
    assert!(pending(asking.as_mut()), "it waits for a");
    let mut a_commit = a.commit();
    assert!(pending(a_commit.as_mut()), "a waits: another is coming");
    (a_commit, asking)
}

/// `close` asked for the writer while a group waited for a transaction asking before it,
/// which then gave up: `close` commits the open group and its member hears so.
#[tokio::test]
async fn close_commits_an_open_group_and_tells_its_waiters() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir).await;
    let (a_commit, gone) = a_waits_for_one_asking(&store).await;
    let mut closing = Box::pin(store.close());
    assert!(pending(closing.as_mut()), "close waits for its turn");
    drop(gone);
    closing.await;
    a_commit.await.expect("close committed a's group");
    let fresh = open(&dir).await;
    assert_eq!(rows(&fresh).await, vec![1]);
    fresh.close().await;
}

/// A `COMMIT` statement run inside a transaction would make the group's writes durable
/// behind the members' backs; it is refused and rolls the group back, and every member
/// hears that nothing was kept.
#[tokio::test]
async fn a_commit_statement_inside_a_transaction_keeps_nothing_and_says_so() {
    let outcome = poisoned(|c| c.execute_batch("COMMIT")).await;
    assert!(!outcome.0, "a hears its writes were not kept");
    told_the_truth(outcome);
}

/// A `ROLLBACK` followed by a `BEGIN` inside a transaction leaves SQLite in a
/// transaction again, but not the group's: the members released before it lost their
/// writes and must hear so, not "committed" when the new transaction commits.
#[tokio::test]
async fn a_rollback_and_begin_inside_a_transaction_does_not_pass_for_the_group() {
    let outcome = poisoned(|c| c.execute_batch("ROLLBACK; BEGIN")).await;
    assert!(!outcome.0, "a hears its writes were not kept");
    told_the_truth(outcome);
}

/// Tables whose deferred foreign key is checked only at the outer `COMMIT`.
async fn deferred(store: &SqliteStore) {
    let mut setup = store.begin().await.expect("begin");
    for sql in [
        "CREATE TABLE parent (id INTEGER PRIMARY KEY)",
        "CREATE TABLE child (pid INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)",
    ] {
        setup.execute(sql, &[]).await.expect(sql);
    }
    setup.commit().await.expect("setup");
}

/// [`a_waits_for_b`], `b` having written a row whose deferred parent key is missing.
async fn b_violates_a_deferred_key(store: &SqliteStore) -> (common::Commit, Tx) {
    deferred(store).await;
    let (a_commit, mut b) = a_waits_for_b(store).await;
    b.execute("INSERT INTO child (pid) VALUES (42)", &[])
        .await
        .expect("a deferred violation is accepted at the statement");
    (a_commit, b)
}

/// `b` releases a row violating a deferred foreign key into the group `a` waits on: the
/// shared `COMMIT` fails and keeps nothing, and `a`, which may not be the culprit, hears
/// a retryable error (a worker would otherwise fail its job for good on `Invalid`).
#[tokio::test]
async fn a_member_failed_by_a_shared_commit_hears_a_retryable_error() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir).await;
    let (a_commit, b) = b_violates_a_deferred_key(&store).await;
    assert!(b.commit().await.is_err(), "the shared COMMIT failed");
    let err = a_commit.await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert_eq!(rows(&store).await, Vec::<i64>::new(), "nothing was kept");

    // Alone, the violation is the committer's own: it hears the constraint.
    let mut c = store.begin().await.expect("begin c");
    c.execute("INSERT INTO child (pid) VALUES (42)", &[])
        .await
        .expect("accepted at the statement");
    let err = c.commit().await.unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    store.close().await;
}

/// A deferred foreign key is checked at the outer `COMMIT`, which the members share: `b`
/// releases a row whose parent is missing, and the group's `COMMIT` fails. Alone, `a`
/// would have committed; in the group it hears "failed" (truthfully: nothing was kept).
#[tokio::test]
#[ignore = "finding: a deferred constraint one member violates fails the shared COMMIT, \
            so every member of its group fails (told the truth, and with a retryable \
            error, but a member's outcome depends on another's); a fix would check \
            sqlite3_db_status(SQLITE_DBSTATUS_DEFERRED_FKS) at each release, which \
            rusqlite does not wrap (unsafe FFI)"]
async fn a_deferred_foreign_key_violated_by_one_member_fails_only_that_member() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir).await;
    let (a_commit, b) = b_violates_a_deferred_key(&store).await;
    let b_result = b.commit().await;
    let a_result = a_commit.await;
    let kept = rows(&store).await;
    assert_eq!(a_result.is_ok(), kept.contains(&1), "a heard the truth");
    assert!(b_result.is_err(), "b's commit fails its deferred check");
    assert!(
        a_result.is_ok(),
        "a does not fail for b's violation: {a_result:?}"
    );
    store.close().await;
}

/// `a` committed while another transaction asked for the writer, then that one gave up
/// (its `begin` dropped, as a timeout around it would): `a`'s group is due at once, not
/// at the end of its window (600 s here; the timeout only turns a regression into a
/// failure instead of a hang).
#[tokio::test]
async fn a_group_whose_coming_transaction_gives_up_commits_without_waiting_its_window() {
    let dir = tempfile::tempdir().expect("dir");
    let store = store(&dir).await;
    let (a_commit, gone) = a_waits_for_one_asking(&store).await;
    drop(gone);
    tokio::time::timeout(Duration::from_secs(60), a_commit)
        .await
        .expect("a's group commits once no one is coming")
        .expect("a commits");
    assert_eq!(rows(&store).await, vec![1]);
    store.close().await;
}
