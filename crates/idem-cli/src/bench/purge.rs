//! `purge`: the purger's batched deletes on large tables (PostgreSQL), with a worker
//! running fenced jobs beside them. The scratch schema gets `--purge-rows` completed jobs
//! (an attempt row each) and as many effect dedup records, all past their retention, then
//! a plain `VACUUM ANALYZE`, as a table the purger has fallen behind on would look. A
//! worker then drains a queue kept fed; its completions are counted over a window before
//! the purge and over the purge itself, which deletes the effect records and then the
//! jobs as the maintenance leader does (`DEFAULT_PURGE_BATCH` per statement, each its own
//! transaction). Reported: each purge's rate and WAL per record; the worker's rate
//! before and during; the tables' and indexes' sizes before, after the purge and after a
//! plain `VACUUM` (the space a purge frees stays in the files, for new rows to reuse).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use idem::{DEFAULT_PURGE_BATCH, Idem, PurgeTarget, WorkerHandle, WorkerReport};
use tokio::task::JoinHandle;

use super::scenarios::{
    EFFECT_TABLE, FencedEffect, figure, fill_history, per_second, seed, worker_config,
};
use super::wal;
use super::{BenchArgs, Figure, Scenario};
use crate::scratch::{Scratch, scalar};

const QUEUE: &str = "purge-load";
/// Jobs the worker runs at once beside the purge.
const CONCURRENCY: usize = 16;
/// Jobs kept waiting in the worker's queue; the feeder tops it up by this many.
const BACKLOG: i64 = 2_000;
/// The tables a purge deletes from, with their indexes.
const TABLES: [&str; 3] = ["idem_job", "idem_job_attempt", "idem_effect"];

/// Fills, measures the worker alone, purges beside it, vacuums; the figures.
pub(super) async fn run(db: &Scratch, args: &BenchArgs) -> anyhow::Result<Vec<Figure>> {
    super::require_postgres(db, Scenario::Purge)?;
    let rows = args.purge_rows;
    let started = Instant::now();
    fill(db, rows).await?;
    let filled = started.elapsed();
    vacuum(&db.idem, "VACUUM ANALYZE").await?;
    let before = sizes(&db.idem).await?;

    let mut tx = db.idem.begin().await?;
    tx.execute(EFFECT_TABLE, &[]).await?;
    tx.commit().await?;
    let load = Load::start(db, args).await?;
    let window = args.purge_window;
    let alone = load.rate_over(window).await?;

    let load_started = load.completed();
    let purge_started = Instant::now();
    // The worker stops whatever the purge answered.
    let purged = purge_all(&db.idem, rows).await;
    let purging = purge_started.elapsed();
    let during = per_second((load.completed() - load_started) as usize, purging);
    let stopped = load.stop().await;
    let mut out = purged?;
    stopped?;
    let after = sizes(&db.idem).await?;
    let t = Instant::now();
    vacuum(&db.idem, "VACUUM").await?;
    let vacuumed_in = t.elapsed();
    let vacuumed = sizes(&db.idem).await?;

    let note = format!(
        "a worker of {CONCURRENCY} jobs at once; the ceiling column is its rate alone over \
         {window:?} before the purge; the purge took {:.1}s",
        purging.as_secs_f64()
    );
    let rate = "fenced rate beside the purge";
    let f = figure(Scenario::Purge, rate, during, "jobs/s")
        .beside(alone)
        .noted(note);
    out.push(f);
    let mb = |b: i64| b as f64 / 1_048_576.0;
    let note = format!(
        "{TABLES:?} with {rows} jobs, attempts and effect records (filled in {:.0}s, then \
         VACUUM ANALYZE); after the purge {:.0} MB; after a plain VACUUM ({:.1}s) {:.0} MB: \
         the freed space stays in the files for new rows",
        filled.as_secs_f64(),
        mb(after),
        vacuumed_in.as_secs_f64(),
        mb(vacuumed)
    );
    let sizes = "tables and indexes before";
    let f = figure(Scenario::Purge, sizes, mb(before), "MB").noted(note);
    out.push(f);
    Ok(out)
}

/// Purges the effect records, then the finished jobs, as the maintenance leader does;
/// a figure for each. An error unless each purge deleted all `rows`.
async fn purge_all(idem: &Idem, rows: u64) -> anyhow::Result<Vec<Figure>> {
    let mut out = Vec::new();
    for (target, what, each) in [
        (PurgeTarget::EffectKeys, "effect dedup records", ""),
        (
            PurgeTarget::FinishedJobs,
            "finished jobs",
            " (a job and its attempt row)",
        ),
    ] {
        let lsn = wal::lsn(idem).await?;
        let t = Instant::now();
        let cutoff = idem.purge_cutoff(target).await?;
        let n = idem
            .purge_before(target, cutoff, DEFAULT_PURGE_BATCH, |_| {})
            .await?;
        let took = t.elapsed();
        let wal = wal::since(idem, &lsn).await?;
        if n != rows {
            bail!("the purge of {what} deleted {n} records; {rows} were past their retention");
        }
        let note = format!(
            "{n} records in {:.1}s, {DEFAULT_PURGE_BATCH} per statement; {:.0} bytes of WAL \
             per record{each}",
            took.as_secs_f64(),
            wal as f64 / n.max(1) as f64,
        );
        let rate = per_second(n as usize, took);
        out.push(figure(Scenario::Purge, &format!("purge {what}"), rate, "records/s").noted(note));
    }
    Ok(out)
}

/// `rows` completed jobs finalized 30 days ago, an attempt row each, and an effect record
/// of each created then: all past the default retention (3 days).
async fn fill(db: &Scratch, rows: u64) -> anyhow::Result<()> {
    let last = scalar(&db.idem, "SELECT coalesce(max(id), 0) FROM idem_job", &[]).await?;
    fill_history(db, rows, Duration::from_secs(30 * 86_400)).await?;
    let effects = "INSERT INTO idem_effect (key, kind, job_id, fence, created_at) \
                   SELECT 'history:' || id, 'history', id, 1, finalized_at FROM idem_job \
                   WHERE queue = 'history' AND id > $1";
    let mut tx = db.idem.begin().await?;
    tx.execute(effects, &[last.into()]).await?;
    tx.commit().await?;
    Ok(())
}

/// Runs `sql` (a `VACUUM`, which cannot run in a transaction) on the tables.
async fn vacuum(idem: &Idem, sql: &str) -> anyhow::Result<()> {
    for table in TABLES {
        idem.store().query(&format!("{sql} {table}"), &[]).await?;
    }
    Ok(())
}

/// Bytes of the tables, their indexes and TOAST.
async fn sizes(idem: &Idem) -> anyhow::Result<i64> {
    let each: Vec<String> = TABLES
        .iter()
        .map(|t| format!("pg_total_relation_size('{t}')"))
        .collect();
    let sql = format!("SELECT ({})::bigint", each.join(" + "));
    scalar(idem, &sql, &[]).await
}

/// A worker draining [`QUEUE`] of fenced jobs, and a feeder keeping it waiting.
struct Load {
    idem: Idem,
    worker: WorkerHandle,
    feeding: Arc<AtomicBool>,
    feeder: JoinHandle<anyhow::Result<()>>,
}

impl Load {
    /// On a store of its own, sized for its jobs and duties, beside the purge's.
    async fn start(db: &Scratch, args: &BenchArgs) -> anyhow::Result<Load> {
        let mut options = idem::ConnectOptions::default();
        let wanted = CONCURRENCY as u32 + idem::WORKER_CONNECTIONS;
        options.postgres.max_connections = idem_postgres::Budget::total_for(wanted);
        let idem = Idem::from_store(idem::connect_store_with(&db.url, options).await?);
        seed(idem.store().as_ref(), QUEUE, BACKLOG as usize).await?;
        let mut config = worker_config(QUEUE, CONCURRENCY, args.claim_batch);
        // No purger of its own: the scenario's purge is the one measured, and a second
        // one deleting the same oldest rows would cut its batches short.
        config.purge_interval = None;
        let mut w = idem.worker(config)?;
        w.register(FencedEffect)?;
        let worker = w.start();
        worker.ready().await;
        let feeding = Arc::new(AtomicBool::new(true));
        let (fed, go_on) = (idem.clone(), feeding.clone());
        let feeder = tokio::spawn(async move {
            let waiting = "SELECT count(*) FROM idem_job WHERE queue = 'purge-load' \
                           AND state = 'available'";
            while go_on.load(Ordering::Relaxed) {
                if scalar(&fed, waiting, &[]).await? < BACKLOG / 2 {
                    seed(fed.store().as_ref(), QUEUE, BACKLOG as usize).await?;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(())
        });
        Ok(Load {
            idem,
            worker,
            feeding,
            feeder,
        })
    }

    fn completed(&self) -> u64 {
        self.worker.report().completed
    }

    /// The worker's completions per second over the next `window`.
    async fn rate_over(&self, window: Duration) -> anyhow::Result<f64> {
        let from = self.completed();
        tokio::time::sleep(window).await;
        let report = self.worker.report();
        none_failed(&report)?;
        Ok(per_second((report.completed - from) as usize, window))
    }

    async fn stop(self) -> anyhow::Result<()> {
        self.feeding.store(false, Ordering::Relaxed);
        let fed = self.feeder.await?;
        let report = self.worker.shutdown().await;
        self.idem.close().await;
        fed?;
        none_failed(&report)
    }
}

/// An error when any of the worker's fenced jobs failed.
fn none_failed(report: &WorkerReport) -> anyhow::Result<()> {
    if report.dead + report.retried > 0 {
        bail!("the worker's fenced jobs failed: {report:?}");
    }
    Ok(())
}
