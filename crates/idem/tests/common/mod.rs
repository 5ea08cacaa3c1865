//! Shared pieces of the engine's tests: a client over a test database, an effect table
//! in the caller's own schema, and signals that handlers send to the test.
#![allow(dead_code)]

pub mod awaiting;
pub mod remote;

use std::future::Future;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use idem::{
    Clock, EffectClass, EffectKey, EffectTx, Handler, Idem, IdemError, JobContext, JobError,
    JobRow, LeaseToken, ManualClock, SqlValue, WorkerConfig,
};
use idem_store_tests::TestDb;
use tokio::sync::{Mutex, mpsc, oneshot};

/// A client on the test database, on `clock` if given.
pub fn client(db: &TestDb, clock: Option<Arc<dyn Clock>>) -> Idem {
    let idem = Idem::from_store(db.store.clone());
    match clock {
        Some(c) => idem.with_clock(c),
        None => idem,
    }
}

/// A manual clock standing at the database's current time.
pub async fn db_clock(db: &TestDb) -> ManualClock {
    ManualClock::new(db.store.now().await.expect("database clock"))
}

/// Waits until job `id` satisfies `done` (as read from the store, within 30 s); returns it.
pub async fn until(idem: &Idem, id: i64, what: &str, done: impl Fn(&JobRow) -> bool) -> JobRow {
    idem_store_tests::harness::within(30, what, async {
        loop {
            let row = job(idem, id).await;
            if done(&row) {
                return row;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// A worker config on one queue, polling often, with the rescuer effectively off (tests
/// rescue explicitly).
pub fn config(queue: &str, concurrency: usize) -> WorkerConfig {
    let mut c = WorkerConfig::default().only_queue(queue, concurrency);
    c.poll_interval = Duration::from_millis(20);
    c.rescue_interval = Duration::from_secs(3600);
    c
}

/// [`config`] with failed attempts retried at once (one rung of zero, no jitter).
pub fn immediate_retries(queue: &str, concurrency: usize) -> WorkerConfig {
    let mut c = config(queue, concurrency);
    c.ladder = idem::retry::RetryLadder {
        rungs: vec![Duration::ZERO],
        jitter: 0.0,
    };
    c
}

/// The effect table of the tests: a plain table of the caller's, with no uniqueness, so
/// a duplicate effect would show as a second row.
pub const EFFECT_TABLE: &str = "CREATE TABLE test_effect (job_id BIGINT NOT NULL, \
     fence BIGINT NOT NULL, worker TEXT NOT NULL)";

/// Creates the effect table.
pub async fn create_effect_table(idem: &Idem) {
    let mut tx = idem.begin().await.expect("begin");
    tx.execute(EFFECT_TABLE, &[])
        .await
        .expect("create effect table");
    tx.commit().await.expect("commit");
}

/// Every effect row as (job_id, fence, worker).
pub async fn effects(idem: &Idem) -> Vec<(i64, i64, String)> {
    let sql = "SELECT job_id, fence, worker FROM test_effect ORDER BY job_id, fence";
    let rows = idem.store().query(sql, &[]).await.expect("read effects");
    rows.into_iter()
        .map(|r| match r.as_slice() {
            [SqlValue::Int(j), SqlValue::Int(f), SqlValue::Text(w)] => (*j, *f, w.clone()),
            other => panic!("unexpected effect row {other:?}"),
        })
        .collect()
}

/// A one-shot signal that a `Sync` handler can fire once.
pub struct Once<T>(Mutex<Option<oneshot::Sender<T>>>);

impl<T> Once<T> {
    pub fn new() -> (Self, oneshot::Receiver<T>) {
        let (tx, rx) = oneshot::channel();
        (Once(Mutex::new(Some(tx))), rx)
    }

    pub async fn fire(&self, v: T) {
        if let Some(tx) = self.0.lock().await.take() {
            let _ = tx.send(v);
        }
    }
}

/// A one-shot wait that a `Sync` handler can await once.
pub struct Gate(Mutex<Option<oneshot::Receiver<()>>>);

impl Gate {
    pub fn new() -> (Self, oneshot::Sender<()>) {
        let (tx, rx) = oneshot::channel();
        (Gate(Mutex::new(Some(rx))), tx)
    }

    pub async fn wait(&self) {
        let rx = self.0.lock().await.take();
        if let Some(rx) = rx {
            let _ = rx.await;
        }
    }
}

/// A channel of events from handlers.
pub fn events<T>() -> (mpsc::UnboundedSender<T>, mpsc::UnboundedReceiver<T>) {
    mpsc::unbounded_channel()
}

/// The job, which must exist.
pub async fn job(idem: &Idem, id: i64) -> JobRow {
    idem.job(id).await.expect("read job").expect("job exists")
}

/// The kind the effect tests enqueue.
pub const EFFECT_KIND: &str = "effect";

/// The effect key of a test job's effect.
pub fn effect_key(job_id: i64) -> EffectKey {
    EffectKey::new("test-effect").part(job_id)
}

/// Claims the job's effect key in `tx` and, when it is new, writes the effect row;
/// returns whether it was new.
pub async fn write_effect(
    tx: &mut EffectTx<'_>,
    lease: LeaseToken,
    worker: &str,
) -> Result<bool, IdemError> {
    let new = tx.claim_effect(&effect_key(lease.job_id)).await?.is_new();
    if new {
        let sql = "INSERT INTO test_effect (job_id, fence, worker) VALUES ($1, $2, $3)";
        tx.execute(
            sql,
            &[lease.job_id.into(), lease.fence.into(), worker.into()],
        )
        .await?;
    }
    Ok(new)
}

/// Writes the effect row (if its key is new) and completes the job, in `tx`; returns
/// whether the key was new.
pub async fn write_and_complete(
    mut tx: EffectTx<'_>,
    lease: LeaseToken,
    worker: &str,
) -> Result<bool, IdemError> {
    let new = write_effect(&mut tx, lease, worker).await?;
    tx.complete().await?;
    Ok(new)
}

/// Writes the effect (if its key is new) and completes the job in one fenced
/// transaction, then reports the fence it committed under and whether the key was new.
pub struct WriteEffect {
    pub worker: &'static str,
    pub done: Once<(i64, bool)>,
}

impl Handler for WriteEffect {
    const KIND: &'static str = EFFECT_KIND;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = serde_json::Value;

    async fn run(&self, cx: &mut JobContext, _: serde_json::Value) -> Result<(), JobError> {
        let lease = cx.lease();
        let tx = cx.begin().await?;
        let new = write_and_complete(tx, lease, self.worker).await?;
        self.done.fire((lease.fence, new)).await;
        Ok(())
    }
}

/// Runs the ignored test `name` of this same test binary as a child process, with `env`
/// set and its stdin, stdout and stderr piped; the child is killed if dropped.
pub fn spawn_test_child(name: &str, env: &[(&str, &str)]) -> tokio::process::Child {
    let exe = std::env::current_exe().expect("test binary path");
    tokio::process::Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            name,
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the child test process")
}

/// Who leads the maintenance duties: the worker's name (the holder without its
/// instance id) and the fence; `None` before the first election.
pub async fn maintenance_leader(idem: &Idem) -> Option<(String, i64)> {
    let sql = "SELECT holder, fence FROM idem_leader WHERE name = 'maintenance'";
    match idem
        .store()
        .query(sql, &[])
        .await
        .expect("leader")
        .first()
        .map(Vec::as_slice)
    {
        Some([SqlValue::Text(h), SqlValue::Int(f)]) => {
            Some((h.split(" #").next().unwrap_or(h).to_owned(), *f))
        }
        None => None,
        other => panic!("leader row: {other:?}"),
    }
}

/// The lines a child test process prints on stdout.
pub type ChildLines = tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>;

/// Waits until the child `name` prints a line containing `ready`; returns the rest of
/// its output. Fails when it ends first or takes over a minute.
pub async fn until_ready(child: &mut tokio::process::Child, name: &str, ready: &str) -> ChildLines {
    use tokio::io::AsyncBufReadExt;
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    idem_store_tests::harness::within(60, "a worker process starts", async {
        while let Some(line) = lines.next_line().await.expect("child stdout") {
            if line.contains(ready) {
                return;
            }
        }
        panic!("worker {name} ended before it was ready");
    })
    .await;
    lines
}

/// The body of the child test `name`: runs `body` on a runtime of its own with the
/// database URL the parent put in `var`; run as an ordinary test (`var` unset), it
/// does nothing but say so.
pub fn as_child<F: Future<Output = ()>>(name: &str, var: &str, body: impl FnOnce(String) -> F) {
    let Ok(url) = std::env::var(var) else {
        eprintln!("{name} runs only as a child process ({var} is unset)");
        return;
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(body(url));
}

/// Rescues the expired leases as B of [`stale_and_live_clients`] sees them, with the
/// retries due on B's clock but not on A's (1 ms before B's now, plus a delay of 1 ms),
/// so A's worker cannot claim a rescued job again once its stale run ends; a rescue
/// without a delay keeps the job's place in claim order, which A's clock has reached.
/// `claimed_by_a` is a job A claimed (its claim time is A's clock). Returns the ids.
pub async fn rescue_for_b_only(idem_b: &Idem, claimed_by_a: i64) -> Vec<i64> {
    let a_now = job(idem_b, claimed_by_a)
        .await
        .attempted_at
        .expect("claimed by A");
    let rescue = idem_store::JobRescue {
        limit: 100,
        retry_in_ms: 1,
        max_attempts: None,
        now: Some(a_now + chrono::Duration::seconds(31) - chrono::Duration::milliseconds(1)),
    };
    let mut ids: Vec<i64> = idem_b
        .store()
        .job_rescue(rescue)
        .await
        .expect("rescue")
        .iter()
        .map(|j| j.id)
        .collect();
    ids.sort_unstable();
    ids
}

/// Two clients on injected clocks: A's frozen at the database's now (its heartbeats
/// renew a lease only up to now + lease), B's past A's lease (31 s ahead).
pub async fn stale_and_live_clients(db: &TestDb) -> (Idem, Idem) {
    let a = db_clock(db).await;
    let b = ManualClock::new(a.get());
    b.advance(Duration::from_secs(31));
    (client(db, Some(Arc::new(a))), client(db, Some(Arc::new(b))))
}

/// A client on the database at `url` whose PostgreSQL store opens at most `size`
/// connections (`PgOptions::max_connections`, shared by its pools).
pub async fn client_with_budget(url: &str, size: u32) -> Idem {
    let postgres = idem::PgOptions {
        max_connections: size,
        ..idem::PgOptions::default()
    };
    let options = idem::ConnectOptions {
        postgres,
        ..idem::ConnectOptions::default()
    };
    Idem::connect_with(url, options).await.expect("connect")
}
