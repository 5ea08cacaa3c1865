//! The scenarios of `idem bench`: each runs the engine, then (for throughput) the same
//! store operations without the engine (`ceiling.rs` for drain and fenced), on queues of
//! its own.

mod ceiling;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use idem::{
    Backend, EffectClass, Handler, Idem, Job, JobContext, JobError, Store, WorkerConfig,
    WorkerHandle,
};
use idem_store::{JobClaim, JobInsert, NewJob};
use serde::de::IgnoredAny;
use tokio::sync::{Notify, watch};

use super::cross_process::{Timed, enqueue_paced, percentiles};
use super::{BenchArgs, Figure, Scenario};
use crate::scratch::Scratch;

pub(super) const KIND: &str = "bench";
const SEED_BATCH: usize = 1_000;
/// The lease of the ceilings' claims: the worker's default.
const LEASE_MS: i64 = 30_000;
pub(super) const EFFECT_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS bench_effect (job_id BIGINT NOT NULL, fence BIGINT NOT NULL)";
pub(super) const EFFECT_INSERT: &str = "INSERT INTO bench_effect (job_id, fence) VALUES ($1, $2)";

/// Runs one scenario.
pub async fn run(db: &Scratch, args: &BenchArgs, s: Scenario) -> anyhow::Result<Vec<Figure>> {
    match s {
        Scenario::Enqueue => enqueue(db, args, args.single_jobs, 1, Scenario::Enqueue).await,
        Scenario::Bulk => enqueue(db, args, args.jobs, args.bulk_batch, Scenario::Bulk).await,
        Scenario::Drain => drain(db, args).await,
        Scenario::Fenced => fenced(db, args).await,
        Scenario::Latency => latency(db, args).await,
        Scenario::LatencyRemote => super::cross_process::run(db, args).await,
        Scenario::Rss => rss(db, args).await,
        Scenario::Http => super::http::run(db, args).await,
        Scenario::Batch => super::batch::run(db, args).await,
        Scenario::Scale => super::scale::run(db, args).await,
        Scenario::Purge => super::purge::run(db, args).await,
    }
}

fn new_job(queue: &str, i: usize) -> NewJob {
    NewJob::new(KIND, queue, serde_json::json!({ "i": i }), 1)
}

pub(super) fn per_second(n: usize, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64().max(1e-9)
}

pub(super) fn figure(scenario: Scenario, metric: &str, value: f64, unit: &'static str) -> Figure {
    Figure {
        scenario,
        metric: metric.to_owned(),
        value,
        unit,
        ceiling: None,
        other_ceilings: Vec::new(),
        note: String::new(),
    }
}

/// Enqueues `n` jobs `batch` per call through the client, then through the store alone
/// (SQLite's bulk ceiling: the store's insert statement in a rusqlite loop).
async fn enqueue(
    db: &Scratch,
    args: &BenchArgs,
    n: usize,
    batch: usize,
    s: Scenario,
) -> anyhow::Result<Vec<Figure>> {
    let (q_engine, q_ceiling) = (format!("{s:?}-engine"), format!("{s:?}-ceiling"));
    let started = Instant::now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(batch) {
        let jobs = chunk
            .iter()
            .map(|i| Job::new(KIND, serde_json::json!({ "i": i })).queue(&q_engine))
            .collect();
        db.idem.enqueue_many(jobs).await?;
    }
    let engine = per_second(n, started.elapsed());
    let mut f = figure(s, "enqueue rate", engine, "jobs/s");
    f.note = format!("{n} jobs, {batch} per statement, one producer");
    if s == Scenario::Bulk && db.idem.store().backend() == idem::Backend::Sqlite {
        let took = ceiling::bulk(db, args, &q_ceiling).await?;
        f.ceiling = Some(per_second(n, took));
        f.note += "; ceiling: the store's multi-row insert, one rusqlite connection";
        return Ok(vec![f]);
    }
    let started = Instant::now();
    insert_jobs(db.idem.store().as_ref(), &q_ceiling, n, batch).await?;
    f.ceiling = Some(per_second(n, started.elapsed()));
    Ok(vec![f])
}

/// Inserts `n` jobs into `queue`, untimed.
pub(super) async fn seed(store: &dyn Store, queue: &str, n: usize) -> anyhow::Result<()> {
    insert_jobs(store, queue, n, SEED_BATCH).await
}

/// Inserts `n` jobs into `queue` through the store, `batch` per statement.
async fn insert_jobs(store: &dyn Store, queue: &str, n: usize, batch: usize) -> anyhow::Result<()> {
    for chunk in (0..n).collect::<Vec<_>>().chunks(batch) {
        let jobs = chunk.iter().map(|i| new_job(queue, *i)).collect();
        store
            .job_insert(JobInsert {
                jobs,
                ..JobInsert::default()
            })
            .await?;
    }
    Ok(())
}

/// Completes every job at once, doing nothing.
pub(super) struct NoOp;

impl Handler for NoOp {
    const KIND: &'static str = KIND;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = IgnoredAny;

    async fn run(&self, _: &mut JobContext, _: IgnoredAny) -> Result<(), JobError> {
        Ok(())
    }
}

/// Writes one effect row and completes in the job's fenced transaction.
pub(super) struct FencedEffect;

impl Handler for FencedEffect {
    const KIND: &'static str = KIND;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = IgnoredAny;

    async fn run(&self, cx: &mut JobContext, _: IgnoredAny) -> Result<(), JobError> {
        let lease = cx.lease();
        let mut tx = cx.begin().await?;
        tx.execute(EFFECT_INSERT, &[lease.job_id.into(), lease.fence.into()])
            .await?;
        tx.complete().await?;
        Ok(())
    }
}

pub(super) fn worker_config(queue: &str, concurrency: usize, claim_batch: usize) -> WorkerConfig {
    let mut c = WorkerConfig::default().only_queue(queue, concurrency);
    c.claim_batch = claim_batch;
    c.poll_interval = Duration::from_millis(10);
    c
}

/// Waits until the worker has completed `n` jobs; returns when that happened.
pub(super) async fn until_completed(h: &WorkerHandle, n: usize) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let r = h.report();
        if r.completed as usize >= n {
            return Ok(Instant::now());
        }
        if r.dead + r.retried > 0 || Instant::now() > deadline {
            bail!("the worker did not complete the jobs: {r:?}");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Runs a worker with `handler` over `n` seeded jobs on a store of its own; jobs/s.
pub(super) async fn engine_rate<H: Handler>(
    db: &Scratch,
    args: &BenchArgs,
    queue: &str,
    handler: H,
    n: usize,
) -> anyhow::Result<f64> {
    let store = ceiling::engine_store(db, args).await?;
    seed(store.as_ref(), queue, n).await?;
    let idem = Idem::from_store(store.clone());
    let mut w = idem.worker(worker_config(queue, args.concurrency, args.claim_batch))?;
    w.register(handler)?;
    let started = Instant::now();
    let h = w.start();
    let done = until_completed(&h, n).await;
    h.shutdown().await;
    store.close().await;
    Ok(per_second(n, done? - started))
}

/// Drains no-op jobs through a worker, then by claim + complete-many in a tight loop.
async fn drain(db: &Scratch, args: &BenchArgs) -> anyhow::Result<Vec<Figure>> {
    let pg = db.idem.store().backend() == Backend::Postgres;
    if pg {
        db.idem.store().query("SELECT 1", &[]).await?;
        set_autovacuum(db, false).await?;
    }
    let dead_before = if pg { dead_tuples(db).await? } else { 0 };
    let engine = engine_rate(db, args, "drain-engine", NoOp, args.jobs).await?;
    let mut out = Vec::new();
    if pg {
        tokio::time::sleep(Duration::from_millis(700)).await; // closed backends flush their stats
        let dead = dead_tuples(db).await? - dead_before;
        let mut f = figure(
            Scenario::Drain,
            "dead tuples per job (idem_job)",
            dead as f64 / args.jobs as f64,
            "tuples",
        );
        f.note = "autovacuum off on the scratch tables during the run".into();
        out.push(f);
    }
    let ceiling = ceiling::drain(db, args, "drain-ceiling").await?;
    let mut f = figure(Scenario::Drain, "drain rate", engine, "jobs/s");
    f.ceiling = Some(ceiling.rate);
    f.note = format!(
        "{} no-op jobs; concurrency {}, claim batch {}; ceiling: {}",
        args.jobs, args.concurrency, args.claim_batch, ceiling.what
    );
    out.insert(0, f);
    if pg {
        set_autovacuum(db, true).await?;
    }
    Ok(out)
}

fn claim(queue: &str, limit: usize) -> JobClaim {
    JobClaim {
        queue: queue.to_owned(),
        limit: u32::try_from(limit).unwrap_or(u32::MAX),
        lease_ms: LEASE_MS,
        worker: "bench-ceiling".to_owned(),
        kinds: None,
        principal: None,
        now: None,
    }
}

/// The fenced-transaction path through a worker, then the same statements in a loop.
async fn fenced(db: &Scratch, args: &BenchArgs) -> anyhow::Result<Vec<Figure>> {
    let mut tx = db.idem.begin().await?;
    tx.execute(EFFECT_TABLE, &[]).await?;
    tx.commit().await?;
    let engine = engine_rate(db, args, "fenced-engine", FencedEffect, args.jobs).await?;
    let mut ceilings = ceiling::fenced(db, args, "fenced-ceiling")
        .await?
        .into_iter();
    let mut f = figure(
        Scenario::Fenced,
        "fenced-transaction rate",
        engine,
        "jobs/s",
    );
    let first = ceilings.next().context("no fenced ceiling")?;
    f.ceiling = Some(first.rate);
    f.note = format!(
        "{} jobs: fence check, one effect row, completion, commit; ceiling: {}",
        args.jobs, first.what
    );
    f.other_ceilings = ceilings
        .map(|c| super::OtherCeiling {
            what: c.what,
            value: c.rate,
        })
        .collect();
    Ok(vec![f])
}

/// Enqueue-to-start latency at `rate` jobs/s on an idle queue.
async fn latency(db: &Scratch, args: &BenchArgs) -> anyhow::Result<Vec<Figure>> {
    let queue = "latency";
    let total = (args.rate as u64 * args.seconds) as usize;
    let (timed, recorded) = Timed::new(total);
    let config = WorkerConfig {
        local_dispatch: !args.no_local_dispatch,
        ..WorkerConfig::default().only_queue(queue, 50)
    };
    let mut w = db.idem.worker(config)?;
    w.register(timed)?;
    let h = w.start();
    enqueue_paced(&db.idem, queue, args.rate, args.seconds).await?;
    let samples = recorded.all_started(Duration::from_secs(60)).await?;
    let local = h.shutdown().await.dispatched_locally;
    let note = format!(
        "{total} jobs at {} jobs/s; from the enqueue call to the handler's start; {local} taken \
         by local dispatch",
        args.rate
    );
    Ok(percentiles(Scenario::Latency, samples, args.rate, &note))
}

/// Holds every job until released.
struct Sleeper {
    started: AtomicUsize,
    total: usize,
    all: Arc<Notify>,
    release: watch::Receiver<bool>,
}

impl Handler for Sleeper {
    const KIND: &'static str = KIND;
    const EFFECT: EffectClass = EffectClass::Transactional;
    type Args = IgnoredAny;

    async fn run(&self, _: &mut JobContext, _: IgnoredAny) -> Result<(), JobError> {
        if self.started.fetch_add(1, Ordering::AcqRel) + 1 == self.total {
            self.all.notify_one();
        }
        let mut release = self.release.clone();
        let _ = release.wait_for(|r| *r).await;
        Ok(())
    }
}

/// Resident memory of this process with `sleepers` jobs running at once.
async fn rss(db: &Scratch, args: &BenchArgs) -> anyhow::Result<Vec<Figure>> {
    let queue = "rss";
    seed(db.idem.store().as_ref(), queue, args.sleepers).await?;
    let before = rss_mb()?;
    let (all, (release_tx, release)) = (Arc::new(Notify::new()), watch::channel(false));
    let cfg = worker_config(queue, args.sleepers, args.claim_batch);
    let mut w = db.idem.worker(cfg)?;
    w.register(Sleeper {
        started: AtomicUsize::new(0),
        total: args.sleepers,
        all: all.clone(),
        release,
    })?;
    let h = w.start();
    tokio::time::timeout(Duration::from_secs(120), all.notified())
        .await
        .context("sleepers did not all start")?;
    let during = rss_mb()?;
    release_tx.send(true)?;
    until_completed(&h, args.sleepers).await?;
    h.shutdown().await;
    let mut f = figure(Scenario::Rss, "resident memory", during, "MB");
    f.note = format!(
        "{} jobs sleeping at once in this process ({before:.1} MB before they started)",
        args.sleepers
    );
    Ok(vec![f])
}

fn rss_mb() -> anyhow::Result<f64> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("cannot read /proc/self/status")?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .context("no VmRSS in /proc/self/status")?;
    Ok(kb / 1024.0)
}

async fn dead_tuples(db: &Scratch) -> anyhow::Result<i64> {
    let sql = "SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables \
               WHERE relname = 'idem_job' AND schemaname = current_schema()";
    crate::scratch::scalar(&db.idem, sql, &[]).await
}

async fn set_autovacuum(db: &Scratch, on: bool) -> anyhow::Result<()> {
    let mut tx = db.idem.begin().await?;
    for table in ["idem_job", "idem_job_attempt"] {
        tx.execute(
            &format!("ALTER TABLE {table} SET (autovacuum_enabled = {on})"),
            &[],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Puts `n` finished jobs (with their attempt rows) into history, in chunks, finalized
/// `ago` before now.
pub async fn fill_history(db: &Scratch, n: u64, ago: Duration) -> anyhow::Result<()> {
    let (jobs, attempts) = match db.idem.store().backend() {
        Backend::Sqlite => (
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < $1) \
             INSERT INTO idem_job (kind, queue, args, priority, state, attempt, max_attempts, run_at, \
             fence, created_at, attempted_at, finalized_at) \
             SELECT 'history', 'history', '{}', 0, 'completed', 1, 1, t, 1, t, t, t \
             FROM s, (SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER) - $2 AS t)",
            "INSERT INTO idem_job_attempt (job_id, attempt, fence, outcome, started_at, finished_at) \
             SELECT id, 1, 1, 'completed', attempted_at, finalized_at FROM idem_job \
             WHERE queue = 'history' AND id > $1",
        ),
        Backend::Postgres => (
            "INSERT INTO idem_job (kind, queue, args, priority, state, attempt, max_attempts, run_at, \
             fence, created_at, attempted_at, finalized_at) \
             SELECT 'history', 'history', '{}'::jsonb, 0, 'completed', 1, 1, t, 1, t, t, t \
             FROM generate_series(1, $1::bigint), \
             (SELECT now() - $2::bigint * interval '1 millisecond' AS t) AS at",
            "INSERT INTO idem_job_attempt (job_id, attempt, fence, outcome, started_at, finished_at) \
             SELECT id, 1, 1, 'completed', attempted_at, finalized_at FROM idem_job \
             WHERE queue = 'history' AND id > $1",
        ),
    };
    let ago = i64::try_from(ago.as_millis()).context("history too old")?;
    let mut left = n;
    while left > 0 {
        let chunk = left.min(100_000);
        let before =
            crate::scratch::scalar(&db.idem, "SELECT coalesce(max(id), 0) FROM idem_job", &[])
                .await?;
        let mut tx = db.idem.begin().await?;
        tx.execute(jobs, &[(chunk as i64).into(), ago.into()])
            .await?;
        tx.execute(attempts, &[before.into()]).await?;
        tx.commit().await?;
        left -= chunk;
    }
    if db.idem.store().backend() == Backend::Postgres {
        let mut tx = db.idem.begin().await?;
        tx.execute("ANALYZE idem_job", &[]).await?;
        tx.execute("ANALYZE idem_job_attempt", &[]).await?;
        tx.commit().await?;
    }
    Ok(())
}
