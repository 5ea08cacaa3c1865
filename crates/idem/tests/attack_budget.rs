//! Adversarial review of the per-process connection budget (3f7c5db: `max_connections`
//! shared by the claim, engine and transaction pools, `idem_postgres::Budget`) and of the
//! completion's lease signal (04a2f88: `LeaseSignal::completing`). PostgreSQL only.
//!
//! Findings, fixed (each test seen red before its fix):
//! - `EffectTx::complete` sets the claim's `completing` flag once the completion is
//!   written, before the commit, and never clears it. When the commit then fails (here a
//!   deferred unique constraint of the handler's own table; equally a connection lost at
//!   `COMMIT`), the handler gets the error and the attempt goes on, but its lease signal
//!   is deaf for the rest of the attempt: a claim later lost (cancelled here; equally
//!   expired and rescued) never raises `JobContext::is_lease_lost` / `lease_lost()`, and
//!   the heartbeat never logs "lease lost". A handler that retries the effect in the same
//!   attempt, or goes on with work outside the store checking the signal, is never told.
//!   (The fence still refuses its next `begin`: no stale commit.) Fixed: a heartbeat
//!   always raises the signal, the flag only keeps it from logging, and a failed commit
//!   clears the flag. Test: `a_failed_complete_leaves_the_lease_signal_heard`.
//! - With `max_connections` 3 the pool for transactions has one connection (1 + 1 + 1),
//!   and `Idem::retry_jobs` holds it in its transaction while it reads the jobs' first
//!   attempts and the clock on the same pool: it waits for itself and fails after 10 s,
//!   every time (seen: "database unavailable", its own transaction ended by the idle
//!   timeout while it waited; otherwise the pool's 10 s acquire timeout). Before 3f7c5db
//!   a setting of 3 gave that pool 3 connections. (A setting of 1 fails the same way,
//!   before and after.) Fixed: the check reads before the transaction opens. Test:
//!   `retry.rs`, `a_retry_needs_one_connection_for_transactions`.
//!
//! Held (passing tests):
//! - A shared pool (`max_connections` 2): a caller's transaction with an enqueue, an
//!   enqueue while that transaction is open, a cancel and a dead-letter retry all finish.
//! - After a failed `complete`, the fence still refuses the handler's next `begin` once
//!   the claim is lost (inside the first test).
//! - At the smallest budget a worker accepts (11: claims 1, engine 2, transactions 8),
//!   enqueues of the worker's process that wait on an enqueue key another open
//!   transaction is taking do not starve the heartbeat: a keyed enqueue runs in a
//!   transaction of the main pool, not on the engine pool the heartbeat draws on, and
//!   the running job's lease is renewed while they wait.
//!   Test: `blocked_enqueues_do_not_starve_the_heartbeat_at_the_smallest_worker_budget`.
//!
//! Not replayed as tests: claims cannot starve heartbeats (claims have a pool of their
//! own from 3 connections on; below 11 no worker is accepted, so the shared pool of 1
//! or 2 never carries a worker); the `completing` flag on its own path is race-free on
//! PostgreSQL (a heartbeat that meets the written completion waits on the row lock
//! until the commit, which follows the flag; before the completion is written the
//! claim's row lock keeps rescue and cancel out).

mod common;

use std::time::Duration;

use common::*;
use idem::{EffectClass, Handler, Idem, Job, JobContext, JobError, JobState, SqlValue};
use idem_postgres::Budget;
use idem_store_tests::TestDb;
use idem_store_tests::harness::within;
use tokio::sync::mpsc;

/// A client on the test database (its schema is in the URL) whose store has the budget
/// `size`, its sessions named `app` on the server.
async fn budget_client(db: &TestDb, size: u32, app: &str) -> Idem {
    let sep = if db.url.contains('?') { '&' } else { '?' };
    client_with_budget(&format!("{}{sep}application_name={app}", db.url), size).await
}

/// A session name of this test's own.
fn app_name(what: &str) -> String {
    use std::hash::{BuildHasher, RandomState};
    let n = RandomState::new().hash_one(std::time::SystemTime::now());
    format!("attack_budget_{what}_{n:016x}")
}

/// Waits until at least `n` server sessions named `app` wait for a lock.
async fn until_sessions_wait(db: &TestDb, app: &str, n: i64) {
    let sql = "SELECT count(*) FROM pg_stat_activity \
               WHERE application_name = $1 AND cardinality(pg_blocking_pids(pid)) > 0";
    within(30, "the sessions block on the lock", async {
        loop {
            let rows = db.store.query(sql, &[app.into()]).await.expect("activity");
            if rows[0][0].as_i64().is_some_and(|c| c >= n) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// The `completing` flag after a failed commit.
// ---------------------------------------------------------------------------------------

#[derive(Debug)]
enum Event {
    Started(i64),
    CompleteFailed(String),
    CompletedUnexpectedly,
    Heard(i64),
    After { heard: bool, begin_refused: bool },
}

/// Writes a row whose deferred unique constraint fails at `COMMIT`, completes (which
/// fails), then waits for the test and reports whether it heard of a lost lease and
/// whether the fence refuses a new transaction.
struct CommitFails {
    events: mpsc::UnboundedSender<Event>,
    gate: Gate,
}

impl Handler for CommitFails {
    const KIND: &'static str = "commit-fails";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let mut tx = cx.begin().await?;
        tx.execute("INSERT INTO once_only (k) VALUES (1)", &[])
            .await?;
        match tx.complete().await {
            Ok(()) => {
                let _ = self.events.send(Event::CompletedUnexpectedly);
                return Ok(());
            }
            Err(e) => {
                let _ = self.events.send(Event::CompleteFailed(e.to_string()));
            }
        }
        // The attempt goes on (a handler that retries, or turns to other work).
        self.gate.wait().await;
        let heard = cx.is_lease_lost();
        let begin_refused = match cx.begin().await {
            Ok(_) => false,
            Err(e) => e.is_lease_lost(),
        };
        let _ = self.events.send(Event::After {
            heard,
            begin_refused,
        });
        Err(JobError::retry("the test is over"))
    }
}

/// Reports that it started, then when it hears its lease is lost.
struct Listens {
    events: mpsc::UnboundedSender<Event>,
}

impl Handler for Listens {
    const KIND: &'static str = "listens";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let id = cx.job().id;
        let _ = self.events.send(Event::Started(id));
        cx.lease_lost().await;
        let _ = self.events.send(Event::Heard(id));
        Err(JobError::retry("lease lost"))
    }
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Event>, what: &str) -> Event {
    within(30, what, rx.recv()).await.expect("events open")
}

/// A handler whose `complete` failed at the commit, and whose claim is then cancelled,
/// should hear that its lease is lost, as every other handler of the worker does.
///
/// Replay: the completion is written, the commit fails on a deferred constraint (the
/// flag stays set); the job and a listening job A are cancelled; A hearing the loss
/// proves a heartbeat found both claims gone (a second listener B, cancelled after A
/// heard, proves that heartbeat's whole pass over the claims ended). The first handler
/// is then let go and asked.
async fn a_failed_complete_leaves_the_lease_signal_heard(db: &TestDb) {
    let idem = client(db, None);
    let mut setup = idem.begin().await.expect("begin");
    let table = "CREATE TABLE once_only (k BIGINT, \
                 CONSTRAINT once_only_k UNIQUE (k) DEFERRABLE INITIALLY DEFERRED)";
    setup.execute(table, &[]).await.expect("create");
    setup
        .execute("INSERT INTO once_only (k) VALUES (1)", &[])
        .await
        .expect("seed");
    setup.commit().await.expect("commit");

    let enqueue = |kind: &'static str| {
        let idem = idem.clone();
        async move {
            idem.enqueue(Job::new(kind, serde_json::json!({})).queue("c"))
                .await
                .expect("enqueue")
                .job
                .id
        }
    };
    let failing = enqueue("commit-fails").await;
    let a = enqueue("listens").await;
    let b = enqueue("listens").await;

    let (events, mut rx) = events();
    let (gate, release) = Gate::new();
    let mut cfg = config("c", 3);
    cfg.heartbeat_interval = Duration::from_millis(50);
    let mut w = idem.worker(cfg).expect("worker");
    w.register(CommitFails {
        events: events.clone(),
        gate,
    })
    .expect("register");
    w.register(Listens { events }).expect("register");
    let w = w.start();

    let mut started = Vec::new();
    let mut failed = None;
    while started.len() < 2 || failed.is_none() {
        match next(&mut rx, "the three handlers start").await {
            Event::Started(id) => started.push(id),
            Event::CompleteFailed(e) => failed = Some(e),
            other => panic!("unexpected {other:?}"),
        }
    }
    let failed = failed.expect("complete failed");
    assert!(failed.contains("once_only"), "{failed}");

    idem.cancel(failing).await.expect("cancel the failed one");
    idem.cancel(a).await.expect("cancel A");
    match next(&mut rx, "A hears its loss").await {
        Event::Heard(id) => assert_eq!(id, a),
        other => panic!("unexpected {other:?}"),
    }
    idem.cancel(b).await.expect("cancel B");
    match next(&mut rx, "B hears its loss").await {
        Event::Heard(id) => assert_eq!(id, b),
        other => panic!("unexpected {other:?}"),
    }
    let _ = release.send(());
    let (heard, begin_refused) = match next(&mut rx, "the failed one answers").await {
        Event::After {
            heard,
            begin_refused,
        } => (heard, begin_refused),
        other => panic!("unexpected {other:?}"),
    };
    within(30, "shutdown", w.shutdown()).await;
    assert_eq!(
        job(&idem, failing).await.state,
        JobState::Cancelled,
        "nothing committed over the cancel"
    );
    assert!(
        begin_refused,
        "the fence refuses the handler's next transaction"
    );
    assert!(
        heard,
        "job {failing}'s claim was cancelled and the heartbeat found it gone (jobs {a} and \
         {b}, cancelled with it and after it, heard theirs), but its handler, whose \
         complete had failed at the commit ({failed}), was never told: the `completing` \
         flag set before the commit stays set"
    );
}

// ---------------------------------------------------------------------------------------
// A pool for transactions of one connection.
// ---------------------------------------------------------------------------------------

/// A cancelled job to retry, in `idem`'s store.
async fn cancelled_job(idem: &Idem) -> i64 {
    let id = idem
        .enqueue(Job::new("nobody", serde_json::json!({})).queue("r"))
        .await
        .expect("enqueue")
        .job
        .id;
    idem.cancel(id).await.expect("cancel");
    id
}

/// A shared pool of 2: the library's own paths never need more than two connections at
/// once, so each finishes.
async fn a_shared_pool_of_two_serves_the_client(db: &TestDb) {
    assert!(Budget::of(2).shared);
    let idem = budget_client(db, 2, &app_name("shared2")).await;
    within(30, "the client's operations", async {
        let mut tx = idem.begin().await.expect("begin");
        idem.enqueue_tx(&mut tx, Job::new("nobody", serde_json::json!(1)).queue("r"))
            .await
            .expect("enqueue in the transaction");
        // An enqueue of its own while the transaction holds one connection.
        idem.enqueue(Job::new("nobody", serde_json::json!(2)).queue("r"))
            .await
            .expect("enqueue beside the transaction");
        tx.commit().await.expect("commit");
        let id = cancelled_job(&idem).await;
        let retried = idem.retry_jobs(vec![id]).await.expect("retry");
        assert_eq!(retried.len(), 1);
    })
    .await;
    idem.close().await;
}

// ---------------------------------------------------------------------------------------
// The heartbeat on an engine pool of two.
// ---------------------------------------------------------------------------------------

#[derive(Debug)]
enum Run {
    Started(&'static str, i64),
    Heard,
}

/// Reports its start (worker and fence), then waits for the test or for the news that its
/// lease is lost.
struct Call {
    worker: &'static str,
    events: mpsc::UnboundedSender<Run>,
    gate: Gate,
}

impl Handler for Call {
    const KIND: &'static str = "call";
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let _ = self.events.send(Run::Started(self.worker, cx.job().fence));
        tokio::select! {
            _ = self.gate.wait() => Ok(()),
            _ = cx.lease_lost() => {
                let _ = self.events.send(Run::Heard);
                Err(JobError::retry("lease lost"))
            }
        }
    }
}

async fn next_run(rx: &mut mpsc::UnboundedReceiver<Run>, what: &str) -> Run {
    within(60, what, rx.recv()).await.expect("events open")
}

/// The job's lease end as the database has it, and whether it has passed.
async fn lease_state(db: &TestDb, id: i64) -> (SqlValue, bool) {
    let sql = "SELECT lease_expires_at::text, lease_expires_at < now() FROM idem_job \
               WHERE id = $1";
    let mut rows = db.store.query(sql, &[id.into()]).await.expect("lease");
    let row = rows.remove(0);
    (row[0].clone(), row[1] == SqlValue::Bool(true))
}

/// A worker process at the smallest budget a worker accepts (11: claims 1, engine 2,
/// transactions 8) keeps renewing the lease of its running job while as many enqueues of
/// the same process as the engine pool has connections wait on an enqueue key another
/// transaction is taking (a re-sent request while the first one's transaction is open).
///
/// Replay: W's handler runs (lease 1 s, heartbeat every 100 ms); another session opens a
/// transaction that enqueues with key `dup`; two enqueues of W with the same key wait on
/// it (seen through `pg_blocking_pids`). The test then watches the job's lease on the
/// database until it is either renewed past the value read once both wait (the
/// heartbeat got through) or has passed (it did not).
async fn blocked_enqueues_do_not_starve_the_heartbeat_at_the_smallest_worker_budget(db: &TestDb) {
    let budget = Budget::of(11);
    assert_eq!(
        (budget.claims, budget.engine, budget.transactions),
        (1, 2, 8)
    );
    let app = app_name("engine2");
    let idem_w = budget_client(db, 11, &app).await;
    let idem_b = client(db, None);

    let (events, mut rx) = events();
    let (gate, release) = Gate::new();
    let mut cfg = config("s", 1);
    cfg.lease = Duration::from_secs(1);
    cfg.heartbeat_interval = Duration::from_millis(100);
    let mut w = idem_w.worker(cfg).expect("a worker fits 11");
    w.register(Call {
        worker: "w",
        events: events.clone(),
        gate,
    })
    .expect("register");
    let w = w.start();
    let id = idem_b
        .enqueue(Job::new("call", serde_json::json!({})).queue("s"))
        .await
        .expect("enqueue")
        .job
        .id;
    let first_fence = match next_run(&mut rx, "W runs the job").await {
        Run::Started("w", fence) => fence,
        other => panic!("unexpected {other:?}"),
    };

    // A transaction taking enqueue key `dup`, open; two enqueues of W's process with the
    // same key wait for it, each in a transaction of W's pool for transactions (the
    // engine pool, which the heartbeat uses, stays free).
    let parked = || Job::new("parked", serde_json::json!({})).queue("other");
    let mut holder = idem_b.begin().await.expect("begin");
    idem_b
        .enqueue_tx(&mut holder, parked().enqueue_key("dup"))
        .await
        .expect("take the key");
    let mut waiting = Vec::new();
    for _ in 0..budget.engine {
        let idem = idem_w.clone();
        let job = parked().enqueue_key("dup");
        waiting.push(tokio::spawn(async move { idem.enqueue(job).await }));
    }
    until_sessions_wait(db, &app, i64::from(budget.engine)).await;

    let (before, _) = lease_state(db, id).await;
    let expired = within(30, "the lease is renewed or passes", async {
        loop {
            let (now, passed) = lease_state(db, id).await;
            if passed {
                return true;
            }
            if now != before {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    holder.rollback().await.expect("rollback");
    for task in waiting {
        within(30, "the waiting enqueues", task)
            .await
            .expect("task")
            .expect("enqueue");
    }
    let _ = release.send(());
    within(30, "shutdown W", w.shutdown()).await;
    idem_w.store().close().await;
    assert!(
        !expired,
        "the lease of job {id} (fence {first_fence}) passed on a healthy worker while {} \
         enqueues of its process waited on an enqueue key",
        budget.engine
    );
    assert!(
        rx.try_recv().is_err(),
        "W's handler was told of a lost lease"
    );
}

idem_store_tests::postgres_cases!(
    a_failed_complete_leaves_the_lease_signal_heard,
    a_shared_pool_of_two_serves_the_client,
    blocked_enqueues_do_not_starve_the_heartbeat_at_the_smallest_worker_budget,
);
