//! The ceilings of the bulk (SQLite), drain and fenced scenarios: the engine's statements
//! without the engine, run so that the engine cannot beat them by overlapping work.
//!
//! - PostgreSQL: the store's own operations (so the very statements the engine sends,
//!   prepared by sqlx), on as many connections at once as the engine's store has
//!   (fenced: its pool; drain: one claim loop and the completer's flushes in flight).
//! - SQLite: rusqlite on one connection of its own, in the tightest loop the driver
//!   allows (`idem_sqlite::ceiling`); the fenced one twice, with a `COMMIT` per job and
//!   with one `COMMIT` per group of jobs (each job a savepoint).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::Context;
use idem::{Backend, Durability, Store};
use idem_store::{JobComplete, JobCompleteMany, JobLock, LeaseToken};
use tokio::task::JoinSet;

use super::{BenchArgs, EFFECT_INSERT, LEASE_MS, claim, per_second, seed};
use crate::scratch::{Scratch, sqlite_path};

/// Concurrent statements of a draining worker: its queue's one claim loop and the
/// completer's flushes in flight (`idem`'s `FLUSHES_IN_FLIGHT`, 2).
const DRAIN_LOOPS: usize = 3;

/// A ceiling: jobs/s and what it ran.
pub(super) struct Ceiling {
    pub rate: f64,
    pub what: String,
}

/// The store the engine's worker runs on in the drain and fenced scenarios: on
/// PostgreSQL, a pool of `--connections`.
pub(super) async fn engine_store(db: &Scratch, args: &BenchArgs) -> anyhow::Result<Arc<dyn Store>> {
    let mut options = idem::ConnectOptions::default();
    options.postgres.max_connections = args.connections;
    Ok(idem::connect_store_with(&db.url, options).await?)
}

fn sqlite_file(db: &Scratch) -> anyhow::Result<PathBuf> {
    sqlite_path(&db.url)
        .map(PathBuf::from)
        .context("the scratch database has no SQLite path")
}

fn durability(args: &BenchArgs) -> Durability {
    match args.synchronous.as_str() {
        "normal" => Durability::Normal,
        _ => Durability::Full,
    }
}

/// SQLite's bulk ceiling: `args.jobs` jobs into `queue`, `args.bulk_batch` per
/// transaction, by `idem_sqlite::ceiling::bulk`; the time it took.
pub(super) async fn bulk(
    db: &Scratch,
    args: &BenchArgs,
    queue: &str,
) -> anyhow::Result<std::time::Duration> {
    let (path, sync, q) = (sqlite_file(db)?, durability(args), queue.to_owned());
    let (n, batch) = (args.jobs, args.bulk_batch);
    let took =
        tokio::task::spawn_blocking(move || idem_sqlite::ceiling::bulk(&path, &q, n, batch, sync))
            .await??;
    Ok(took)
}

/// Drains `args.jobs` no-op jobs of `queue` (seeded here) by claim + complete-many.
pub(super) async fn drain(db: &Scratch, args: &BenchArgs, queue: &str) -> anyhow::Result<Ceiling> {
    seed(db.idem.store().as_ref(), queue, args.jobs).await?;
    if db.idem.store().backend() == Backend::Sqlite {
        let (path, sync, batch, q) = (
            sqlite_file(db)?,
            durability(args),
            args.claim_batch,
            queue.to_owned(),
        );
        let (n, took) = tokio::task::spawn_blocking(move || {
            idem_sqlite::ceiling::drain(&path, &q, sync, batch)
        })
        .await??;
        return Ok(Ceiling {
            rate: per_second(n, took),
            what: format!("claim {batch} + complete-many, one rusqlite connection"),
        });
    }
    let store = engine_store(db, args).await?;
    let started = Instant::now();
    let mut loops = JoinSet::new();
    for _ in 0..DRAIN_LOOPS {
        let (store, queue, batch) = (store.clone(), queue.to_owned(), args.claim_batch);
        loops.spawn(async move { drain_loop(store.as_ref(), &queue, batch).await });
    }
    let n: usize = join_all(loops).await?.into_iter().sum();
    let rate = per_second(n, started.elapsed());
    store.close().await;
    Ok(Ceiling {
        rate,
        what: format!(
            "{DRAIN_LOOPS} concurrent loops of claim {} + complete-many",
            args.claim_batch
        ),
    })
}

/// Claims `batch` jobs and completes them in one statement, until none are left.
async fn drain_loop(store: &dyn Store, queue: &str, batch: usize) -> anyhow::Result<usize> {
    let mut n = 0;
    loop {
        let jobs = store.job_claim(claim(queue, batch)).await?;
        if jobs.is_empty() {
            return Ok(n);
        }
        n += jobs.len();
        let leases = jobs.iter().map(|j| j.lease_token()).collect();
        store
            .job_complete_many(JobCompleteMany {
                leases,
                results: Vec::new(),
                now: None,
            })
            .await?;
    }
}

async fn join_all<T: 'static>(mut set: JoinSet<anyhow::Result<T>>) -> anyhow::Result<Vec<T>> {
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        out.push(r??);
    }
    Ok(out)
}

/// The fenced path of `args.jobs` jobs of `queue` (seeded and claimed here, untimed):
/// the grouped ceiling first (the ratio's), then on SQLite a `COMMIT` per job too.
pub(super) async fn fenced(
    db: &Scratch,
    args: &BenchArgs,
    queue: &str,
) -> anyhow::Result<Vec<Ceiling>> {
    if db.idem.store().backend() == Backend::Sqlite {
        let path = sqlite_file(db)?;
        let mut out = Vec::new();
        for group in [args.ceiling_group, 1] {
            let q = format!("{queue}-{group}");
            seed(db.idem.store().as_ref(), &q, args.jobs).await?;
            out.push(sqlite_fenced(&path, &q, durability(args), group, args.claim_batch).await?);
        }
        return Ok(out);
    }
    seed(db.idem.store().as_ref(), queue, args.jobs).await?;
    let store = engine_store(db, args).await?;
    let leases = claim_all(store.as_ref(), queue, args.claim_batch).await?;
    let connections = store.connections().unwrap_or(1) as usize;
    let rate = pg_fenced(store.clone(), leases, connections).await?;
    store.close().await;
    Ok(vec![Ceiling {
        rate,
        what: format!("{connections} connections at once, the store's own statements"),
    }])
}

/// SQLite: claims `queue`, then runs the fenced loop with one `COMMIT` per `group` jobs.
async fn sqlite_fenced(
    path: &std::path::Path,
    queue: &str,
    sync: Durability,
    group: usize,
    batch: usize,
) -> anyhow::Result<Ceiling> {
    let (path, queue) = (path.to_owned(), queue.to_owned());
    let (n, took) = tokio::task::spawn_blocking(move || {
        let leases = idem_sqlite::ceiling::claim_all(&path, &queue, batch)?;
        let took = idem_sqlite::ceiling::fenced(&path, &leases, EFFECT_INSERT, sync, group)?;
        anyhow::Ok((leases.len(), took))
    })
    .await??;
    let what = match group {
        1 => "one COMMIT per job, one rusqlite connection".to_owned(),
        g => format!("one COMMIT per {g} jobs (a SAVEPOINT each), one rusqlite connection"),
    };
    Ok(Ceiling {
        rate: per_second(n, took),
        what,
    })
}

/// Claims every waiting job of `queue`, `batch` per claim.
async fn claim_all(
    store: &dyn Store,
    queue: &str,
    batch: usize,
) -> anyhow::Result<Vec<LeaseToken>> {
    let mut leases = Vec::new();
    loop {
        let jobs = store.job_claim(claim(queue, batch)).await?;
        if jobs.is_empty() {
            return Ok(leases);
        }
        leases.extend(jobs.iter().map(|j| j.lease_token()));
    }
}

/// PostgreSQL: `connections` tasks take the claimed jobs in turn and run each one's
/// fenced transaction through the store; jobs/s.
async fn pg_fenced(
    store: Arc<dyn Store>,
    leases: Vec<LeaseToken>,
    connections: usize,
) -> anyhow::Result<f64> {
    let (n, next, leases) = (
        leases.len(),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(leases),
    );
    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for _ in 0..connections {
        let (store, next, leases) = (store.clone(), next.clone(), leases.clone());
        tasks.spawn(async move {
            while let Some(&lease) = leases.get(next.fetch_add(1, Ordering::Relaxed)) {
                fenced_job(store.as_ref(), lease).await?;
            }
            anyhow::Ok(())
        });
    }
    join_all(tasks).await?;
    Ok(per_second(n, started.elapsed()))
}

/// One job's fenced transaction through the store, as the engine's `EffectTx` runs it:
/// begin, fence check, one effect row, completion, commit.
async fn fenced_job(store: &dyn Store, lease: LeaseToken) -> anyhow::Result<()> {
    let mut tx = store.begin().await?;
    let mut lock = JobLock::of(lease);
    lock.idle_timeout_ms = Some(LEASE_MS);
    tx.job_lock(lock).await?;
    tx.execute(EFFECT_INSERT, &[lease.job_id.into(), lease.fence.into()])
        .await?;
    tx.job_complete(JobComplete {
        lease,
        result: None,
        now: None,
    })
    .await?;
    tx.commit().await?;
    Ok(())
}
