//! Attacks on SQLite group commit (issue 15) at the level of jobs: a fence check and a
//! rescue that share one group commit still order as two transactions would.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Waker};
use std::time::Duration;

use idem_sqlite::{SqliteOptions, SqliteStore};
use idem_store::{JobLock, JobRescue, JobState, SqlValue, Store};
use idem_store_tests::TestDb;
use idem_store_tests::fixture::{LEASE_MS, assert_lease_lost, at, job_in, running, t0};

fn pending<F: Future + ?Sized>(f: Pin<&mut F>) -> bool {
    f.poll(&mut Context::from_waker(Waker::noop())).is_pending()
}

/// A second store on `db`'s file whose groups stay open until no transaction is coming,
/// so the test decides which transactions share a commit.
async fn grouped(db: &TestDb) -> SqliteStore {
    let options = SqliteOptions {
        group_commit_window: Duration::from_secs(600),
        ..SqliteOptions::default()
    };
    SqliteStore::connect(&db.url, options)
        .await
        .expect("connect")
}

fn rescue_after_expiry() -> JobRescue {
    JobRescue {
        limit: 10,
        retry_in_ms: 0,
        max_attempts: None,
        now: Some(at(LEASE_MS + 1)),
    }
}

/// The rescuer's transaction is released into the group, not yet durable, when the stale
/// worker's transaction checks its fence in the same group: the check sees the rescue
/// and fails, and the stale worker's effect row is not kept.
#[tokio::test]
async fn a_fence_check_after_a_rescue_in_the_same_group_fails() {
    let db = TestDb::sqlite().await;
    let job = running(&db, job_in("attack", "k"), t0()).await;
    let store = grouped(&db).await;

    let mut rescuer = store.begin().await.expect("begin rescuer");
    let rescued = rescuer
        .job_rescue_rows(rescue_after_expiry())
        .await
        .expect("rescue");
    assert_eq!(rescued.len(), 1, "the expired claim is rescued");
    let mut stale_begin = Box::pin(store.begin());
    assert!(pending(stale_begin.as_mut()), "the stale worker waits");
    let mut rescue_commit = rescuer.commit();
    assert!(
        pending(rescue_commit.as_mut()),
        "the rescue waits for the group"
    );

    let mut stale = stale_begin.await.expect("begin stale");
    let locked = stale.job_lock(JobLock::of(job.lease_token())).await;
    assert_lease_lost(locked, job.lease_token());
    drop(stale);
    rescue_commit.await.expect("the rescue commits");

    let row = db.store.job_get(job.id).await.expect("get").expect("row");
    assert_ne!(row.state, JobState::Running, "the job was rescued");
    store.close().await;
    db.cleanup().await;
}

/// The worker's fence check and effect come first in the group and it completes; the
/// rescue in the same group after it finds nothing to rescue, and both commit.
#[tokio::test]
async fn a_rescue_after_a_fenced_completion_in_the_same_group_finds_nothing() {
    let db = TestDb::sqlite().await;
    let job = running(&db, job_in("attack", "k"), t0()).await;
    let store = grouped(&db).await;
    let mut setup = store.begin().await.expect("begin");
    setup
        .execute("CREATE TABLE effect (job_id INTEGER NOT NULL)", &[])
        .await
        .expect("create");
    setup.commit().await.expect("commit setup");

    let mut worker = store.begin().await.expect("begin worker");
    worker
        .job_lock(JobLock::of(job.lease_token()))
        .await
        .expect("the fence holds");
    worker
        .execute(
            "INSERT INTO effect (job_id) VALUES ($1)",
            &[SqlValue::from(job.id)],
        )
        .await
        .expect("effect");
    let complete = idem_store::JobComplete {
        lease: job.lease_token(),
        result: None,
        now: Some(at(1)),
    };
    worker.job_complete_row(complete).await.expect("complete");
    let mut rescuer_begin = Box::pin(store.begin());
    assert!(pending(rescuer_begin.as_mut()), "the rescuer waits");
    let mut worker_commit = worker.commit();
    assert!(
        pending(worker_commit.as_mut()),
        "the worker waits for the group"
    );

    let mut rescuer = rescuer_begin.await.expect("begin rescuer");
    let rescued = rescuer
        .job_rescue_rows(rescue_after_expiry())
        .await
        .expect("rescue");
    assert!(rescued.is_empty(), "a completed job is not rescued");
    rescuer.commit().await.expect("rescuer commits");
    worker_commit.await.expect("worker commits");

    let row = db.store.job_get(job.id).await.expect("get").expect("row");
    assert_eq!(row.state, JobState::Completed);
    let effects = db
        .store
        .query("SELECT count(*) FROM effect", &[])
        .await
        .expect("count");
    assert_eq!(effects[0][0].as_i64(), Some(1), "one effect row");
    store.close().await;
    db.cleanup().await;
}
