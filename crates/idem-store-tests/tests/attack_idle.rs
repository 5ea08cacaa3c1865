//! Adversarial review of the PostgreSQL idle timeouts (73e8efb): the one every
//! transaction carries (`PgOptions::idle_in_transaction_timeout`) and the leadership
//! check's, whose floor went from 5 s to 1 s. Each case stops a transaction's holder (it
//! sends nothing more) at the worst moment and checks that nothing it wrote is taken as
//! done and that what it held moves on. All held; PostgreSQL only (SQLite has no
//! sessions to end, its single writer serialises everything).

use std::sync::Arc;
use std::time::Duration;

use idem_postgres::{PgOptions, PgStore};
use idem_store::{
    BatchCreate, BatchInsert, BatchState, IntentBegin, IntentBegun, IntentFinish, IntentOutcome,
    IntentState, JobClaim, JobComplete, JobInsert, JobRescue, JobState, LeaderElect, LeaseToken,
    NewJob, OnDead, Store,
};
use idem_store_tests::TestDb;
use idem_store_tests::fixture::{assert_waits_for, at, job_in, spawn_started};
use idem_store_tests::harness::{backend_pid, until_session_ends, within};

/// A store in a fresh schema whose transactions may sit idle for `idle_ms`.
async fn idle_store(idle_ms: u64) -> Option<(Arc<PgStore>, String)> {
    let base = idem_store::testing::pg_url_or_skip()?;
    let schema = format!("idem_test_{:016x}", rand::random::<u64>());
    let options = PgOptions {
        schema: Some(schema.clone()),
        max_connections: 4,
        idle_in_transaction_timeout: Duration::from_millis(idle_ms),
        ..PgOptions::default()
    };
    let store = PgStore::connect(&base, options).await.expect("connect");
    store.migrate().await.expect("migrate");
    Some((Arc::new(store), schema))
}

async fn drop_schema(store: &PgStore, schema: &str) {
    let sql = format!("DROP SCHEMA IF EXISTS {schema} CASCADE");
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(store.pool())
        .await
        .expect("drop schema");
}

const NAME: &str = "maintenance";

async fn elect(store: &dyn Store, holder: &str, ttl_ms: i64) -> idem_store::Leadership {
    let params = LeaderElect {
        name: NAME.to_owned(),
        holder: holder.to_owned(),
        ttl_ms,
        now: None,
    };
    store.leader_elect(params).await.expect("leader_elect")
}

fn rescue_now() -> JobRescue {
    JobRescue {
        limit: 10,
        retry_in_ms: 0,
        max_attempts: None,
        now: None,
    }
}

/// A leader stops right after its leadership check (which holds the leadership row and
/// sets the transaction's idle timeout to what is left of its lease, at least 1 s), with
/// its lease about to end. A candidate standing after the lease ended waits for the
/// stopped transaction, is elected once the floor ends its session (well within 5 s),
/// and only then: the stopped leader's rescue and commit are refused and moved nothing,
/// and the new leader's check and rescue go through.
async fn a_leader_stopped_after_its_check_lets_the_next_in_and_commits_nothing(db: &TestDb) {
    let orphan = NewJob {
        claim: Some(idem_store::InsertClaim {
            worker: "dead".into(),
            lease_ms: 1,
        }),
        ..job_in("orphans", "noop")
    };
    let insert = JobInsert {
        jobs: vec![orphan],
        key_window_ms: 60_000,
        now: None,
    };
    let orphan = db.store.job_insert(insert).await.expect("insert").remove(0);
    let a = elect(db.store.as_ref(), "a", 300).await;
    assert_eq!(a.holder, "a");
    let mut stopped = db.store.begin().await.expect("begin");
    stopped
        .leader_check(a.token(), None)
        .await
        .expect("a leads");
    while db.store.now().await.expect("now") <= a.expires_at {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let store = db.store.clone();
    let started = std::time::Instant::now();
    let b = spawn_started(async move { elect(store.as_ref(), "b", 60_000).await }).await;
    assert_waits_for(db, &mut stopped, &b).await;
    // `a` sends nothing more: its session ends after the check's 1 s floor.
    let b = within(5, "b's election behind a stopped check", b)
        .await
        .expect("b's task");
    assert_eq!(
        (b.holder.as_str(), b.fence),
        ("b", a.fence + 1),
        "b is elected"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "b waited for the stopped check ({:?})",
        started.elapsed()
    );
    let rescued = stopped.job_rescue(rescue_now()).await;
    assert!(rescued.is_err(), "the stopped leader's rescue: {rescued:?}");
    assert!(stopped.commit().await.is_err(), "nor does it commit");
    let row = db
        .store
        .job_get(orphan.job.id)
        .await
        .expect("get")
        .expect("job");
    assert_eq!(
        row.state,
        JobState::Running,
        "the deposed leader moved nothing"
    );

    let mut led = db.store.begin().await.expect("begin");
    led.leader_check(b.token(), None).await.expect("b leads");
    let rows = led.job_rescue(rescue_now()).await.expect("b's rescue");
    led.commit().await.expect("b commits");
    assert_eq!(rows.len(), 1, "the leader in force rescues the orphan");
}

idem_store_tests::postgres_cases!(
    a_leader_stopped_after_its_check_lets_the_next_in_and_commits_nothing
);

/// The last child of a sealed batch completes in a transaction (which counts the batch
/// and enqueues its successor), and its holder stops before the commit: the idle timeout
/// ends the session, the commit is refused, and nothing of it stays: no successor, the
/// batch still sealed, the child still running. Rescued and run again, the child
/// finishes the batch with one successor.
#[tokio::test]
async fn a_batch_child_s_completion_ended_by_the_idle_timeout_leaves_nothing() {
    let Some((store, schema)) = idle_store(300).await else {
        return;
    };
    let batch = BatchInsert {
        on_dead: OnDead::Summary,
        successor: job_in("after", "batch-done"),
        failure_successor: None,
        key_window_ms: 86_400_000,
        principal: None,
        now: Some(at(0)),
    };
    let create = BatchCreate {
        batch,
        children: vec![job_in("kids", "child")],
        seal: true,
    };
    let b = store.batch_create(create).await.expect("batch").batch;
    let claim = |now| JobClaim {
        queue: "kids".into(),
        limit: 1,
        lease_ms: 30_000,
        worker: "w".into(),
        kinds: None,
        principal: None,
        now: Some(now),
    };
    let child = store
        .job_claim(claim(at(0)))
        .await
        .expect("claim")
        .remove(0);
    let mut stopped = store.begin().await.expect("begin");
    let pid = backend_pid(stopped.as_mut()).await;
    let done = JobComplete {
        lease: child.lease_token(),
        result: None,
        now: Some(at(1_000)),
    };
    stopped.job_complete(done).await.expect("complete in tx");
    until_session_ends(store.as_ref(), pid).await;
    assert!(stopped.commit().await.is_err(), "the session was ended");

    let successors = || async {
        let sql = "SELECT count(*) FROM idem_job WHERE follows_batch_id = $1";
        store.query(sql, &[b.id.into()]).await.expect("successors")
    };
    assert_eq!(successors().await, vec![vec![0i64.into()]], "no successor");
    let batch = store.batch_get(b.id).await.expect("get").expect("batch");
    assert_eq!(batch.state, BatchState::Sealed, "not finished");
    let row = store.job_get(child.id).await.expect("get").expect("child");
    assert_eq!((row.state, row.fence), (JobState::Running, child.fence));

    let rescue = JobRescue {
        now: Some(at(31_000)),
        ..rescue_now()
    };
    assert_eq!(store.job_rescue(rescue).await.expect("rescue").len(), 1);
    let again = store
        .job_claim(claim(at(31_000)))
        .await
        .expect("claim")
        .remove(0);
    let done = JobComplete {
        lease: again.lease_token(),
        result: None,
        now: Some(at(32_000)),
    };
    store.job_complete(done).await.expect("complete");
    assert_eq!(successors().await, vec![vec![1i64.into()]], "one successor");
    let batch = store.batch_get(b.id).await.expect("get").expect("batch");
    assert_eq!(batch.state, BatchState::Finished);
    drop_schema(&store, &schema).await;
}

/// The holder of an unkeyed intent made its call and records it `completed`, then stops
/// before the commit: the idle timeout ends the session and the commit is refused. The
/// intent is not taken as completed (it stays `in_progress`, nothing stored), and the
/// job's next claim, once the intent's lease has lapsed, is sent to reconciliation: it
/// neither re-sends the call blindly nor reads a result that was never stored.
#[tokio::test]
async fn an_intent_s_completion_ended_by_the_idle_timeout_is_not_taken_as_done() {
    let Some((store, schema)) = idle_store(300).await else {
        return;
    };
    let insert = JobInsert {
        jobs: vec![job_in("calls", "call")],
        key_window_ms: 60_000,
        now: Some(at(0)),
    };
    store.job_insert(insert).await.expect("insert");
    let claim = |now| JobClaim {
        queue: "calls".into(),
        limit: 1,
        lease_ms: 30_000,
        worker: "w".into(),
        kinds: None,
        principal: None,
        now: Some(now),
    };
    let begin = |job: LeaseToken, now| IntentBegin {
        key: "call:1".into(),
        fingerprint: "f".into(),
        unkeyed: true,
        lease_ms: 5_000,
        job,
        now: Some(now),
    };
    let first = store
        .job_claim(claim(at(0)))
        .await
        .expect("claim")
        .remove(0);
    let held = match store
        .intent_begin(begin(first.lease_token(), at(100)))
        .await
        .expect("begin")
    {
        IntentBegun::Begun(row) => row,
        other => panic!("expected Begun, got {other:?}"),
    };
    let mut stopped = store.begin().await.expect("begin");
    let pid = backend_pid(stopped.as_mut()).await;
    let finish = IntentFinish {
        token: held.token(),
        outcome: IntentOutcome::Completed {
            result: serde_json::json!({"id": "r-1"}),
            remote_refs: vec!["r-1".into()],
        },
        now: Some(at(200)),
    };
    stopped.intent_finish(finish).await.expect("finish in tx");
    until_session_ends(store.as_ref(), pid).await;
    assert!(stopped.commit().await.is_err(), "the session was ended");
    let row = store
        .intent_get("call:1".into())
        .await
        .expect("get")
        .expect("intent");
    assert_eq!(row.state, IntentState::InProgress, "{row:?}");
    assert_eq!(row.result, None, "no result stored");

    let rescue = JobRescue {
        now: Some(at(31_000)),
        ..rescue_now()
    };
    assert_eq!(store.job_rescue(rescue).await.expect("rescue").len(), 1);
    let again = store
        .job_claim(claim(at(31_000)))
        .await
        .expect("claim")
        .remove(0);
    let next = store
        .intent_begin(begin(again.lease_token(), at(31_100)))
        .await
        .expect("begin again");
    match next {
        IntentBegun::Reconcile(row) => assert_eq!(row.state, IntentState::Unknown, "{row:?}"),
        other => panic!("an unkeyed takeover goes to reconciliation, got {other:?}"),
    }
    drop_schema(&store, &schema).await;
}
