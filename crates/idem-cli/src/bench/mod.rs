//! `idem bench`: throughput, latency and memory of the engine, each throughput figure
//! beside a ceiling measured in the same run.
//!
//! The ceiling issues the same SQL statements without the engine, set up so that the
//! engine cannot beat it by overlapping work: on PostgreSQL as many statements at once as
//! the engine's connections allow, on SQLite the tightest single-thread loop of the driver
//! (`scenarios/ceiling.rs`). The ratio engine/ceiling is the engine's cost. Every scenario runs on its own queue of a scratch database (a
//! temporary SQLite file, or a fresh PostgreSQL schema dropped afterwards).

mod batch;
mod cpu;
mod cross_process;
mod http;
mod purge;
mod report;
mod scale;
mod scenarios;
mod wal;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use indicatif::ProgressBar;
use serde::Serialize;

use crate::exit::{Exit, OrExit};
use crate::interrupt::Interrupt;
use crate::scratch::{self, Scratch, ScratchArgs};

pub(crate) use cross_process::{ProducerArgs, produce};
pub(crate) use scale::{ScaleWorkerArgs, bench_worker};

/// One benchmark scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Enqueue one job per transaction.
    Enqueue,
    /// Enqueue many jobs per statement.
    Bulk,
    /// Drain no-op jobs already enqueued.
    Drain,
    /// Each job opens its fenced transaction, writes an effect row, completes in it.
    Fenced,
    /// Enqueue-to-start latency at a fixed offered load on an idle queue.
    Latency,
    /// The same with the producer in another process, woken through the store.
    LatencyRemote,
    /// Resident memory with many concurrent sleeping jobs.
    Rss,
    /// The HTTP API: enqueue with and without Idempotency-Key, claim and complete, each
    /// beside the library path.
    Http,
    /// A batch of children and its successor, beside the plain drain of as many jobs.
    Batch,
    /// PostgreSQL: the fenced jobs drained by 1, 2, 4 … worker processes (`--processes`).
    Scale,
    /// PostgreSQL: purges of `--purge-rows` finished jobs and effect records beside a
    /// worker.
    Purge,
}

/// A scenario's name as `--scenarios` takes it and the JSON report writes it
/// (`latency-remote`), wherever one is printed.
impl std::fmt::Display for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value = self.to_possible_value().expect("no scenario is skipped");
        f.write_str(value.get_name())
    }
}

/// Arguments of `idem bench`.
#[derive(Args, Clone, Serialize)]
pub struct BenchArgs {
    /// Scenarios to run, comma-separated
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Scenario::Enqueue, Scenario::Bulk, Scenario::Drain, Scenario::Fenced, Scenario::Latency, Scenario::LatencyRemote, Scenario::Rss, Scenario::Http, Scenario::Batch])]
    pub scenarios: Vec<Scenario>,
    /// Jobs per throughput scenario (bulk, drain, fenced)
    #[arg(long, default_value_t = 20_000)]
    pub jobs: usize,
    /// Children of the batch scenario's batch (at most 10000, one call)
    #[arg(long, default_value_t = 10_000)]
    pub batch_children: usize,
    /// Jobs in the one-per-transaction enqueue scenario
    #[arg(long, default_value_t = 2_000)]
    pub single_jobs: usize,
    /// Jobs per statement in the bulk enqueue scenario
    #[arg(long, default_value_t = 1_000)]
    pub bulk_batch: usize,
    /// Worker concurrency (jobs at once) in drain and fenced
    #[arg(long, default_value_t = 1_000)]
    pub concurrency: usize,
    /// Most jobs per claim statement
    #[arg(long, default_value_t = 500)]
    pub claim_batch: usize,
    /// PostgreSQL: the connection pool of the worker's store in drain and fenced (the
    /// fenced ceiling runs on as many connections at once)
    #[arg(long, default_value_t = idem_postgres::DEFAULT_MAX_CONNECTIONS)]
    pub connections: u32,
    /// Scale scenario: counts of worker processes, comma-separated
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4, 8])]
    pub processes: Vec<usize>,
    /// Scale scenario: jobs at once in all, split among the processes
    #[arg(long, default_value_t = 32)]
    pub scale_concurrency: usize,
    /// Scale scenario: PostgreSQL connections of all the processes together (each gets
    /// what its jobs want within its share, at least the 11 a worker accepts)
    #[arg(long, default_value_t = 88)]
    pub scale_connections: u32,
    /// Purge scenario: finished jobs, and effect records, past their retention
    #[arg(long, default_value_t = 10_000_000)]
    pub purge_rows: u64,
    /// Purge scenario: how long the worker's rate is measured alone before the purge
    #[arg(long, default_value = "5s", value_parser = crate::reconcile::duration, value_name = "DUR")]
    pub purge_window: Duration,
    /// SQLite: jobs per COMMIT in the grouped fenced ceiling (each job a SAVEPOINT)
    #[arg(long, default_value_t = 64)]
    pub ceiling_group: usize,
    /// SQLite commit durability: full or normal
    #[arg(long, default_value = "full")]
    pub synchronous: String,
    /// Offered load of the latency scenario, jobs per second
    #[arg(long, default_value_t = 200)]
    pub rate: u32,
    /// Length of the latency scenario, seconds
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Concurrent sleeping jobs in the memory scenario
    #[arg(long, default_value_t = 1_000)]
    pub sleepers: usize,
    /// Finished jobs to put in history before the scenarios run
    #[arg(long, default_value_t = 0)]
    pub history: u64,
    /// Latency scenario: leave every job to a claim instead of letting the idle worker in
    /// the producer's process take it in the enqueue's transaction
    #[arg(long)]
    pub no_local_dispatch: bool,
    /// Print JSON instead of tables
    #[arg(long)]
    pub json: bool,
    /// Tiny sizes: checks that every scenario runs (for CI); the figures mean nothing
    #[arg(long)]
    pub smoke: bool,
    #[command(flatten)]
    #[serde(flatten)]
    pub scratch: ScratchArgs,
}

impl BenchArgs {
    fn validate(&mut self) -> anyhow::Result<()> {
        if self.smoke {
            self.jobs = 200;
            self.single_jobs = 50;
            self.bulk_batch = 50;
            self.seconds = 1;
            self.rate = 50;
            self.sleepers = 50;
            self.batch_children = 200;
            self.purge_rows = 2_000;
            self.purge_window = Duration::from_millis(500);
            self.history = self.history.min(1_000);
        }
        let sync = self.synchronous.to_ascii_lowercase();
        if sync != "full" && sync != "normal" {
            bail!(
                "--synchronous is {:?}; use full or normal",
                self.synchronous
            );
        }
        self.synchronous = sync;
        for (name, v, max) in [
            ("--jobs", self.jobs, 10_000_000),
            ("--single-jobs", self.single_jobs, 1_000_000),
            ("--bulk-batch", self.bulk_batch, 10_000),
            ("--concurrency", self.concurrency, 10_000),
            ("--claim-batch", self.claim_batch, 10_000),
            ("--connections", self.connections as usize, 1_000),
            ("--ceiling-group", self.ceiling_group, 10_000),
            ("--scale-concurrency", self.scale_concurrency, 10_000),
            (
                "--scale-connections",
                self.scale_connections as usize,
                10_000,
            ),
            ("--sleepers", self.sleepers, 100_000),
            (
                "--batch-children",
                self.batch_children,
                idem::MAX_CHILDREN_PER_CALL,
            ),
        ] {
            if !(1..=max).contains(&v) {
                bail!("{name} is {v}; use 1 to {max}");
            }
        }
        if !(1..=100_000_000).contains(&self.purge_rows) || self.purge_window.is_zero() {
            bail!(
                "--purge-rows is {} and --purge-window {:?}; use 1 to 100000000 rows and a \
                 window above 0",
                self.purge_rows,
                self.purge_window
            );
        }
        if let Some(n) = self.processes.iter().find(|n| !(1..=64).contains(*n)) {
            bail!("--processes has {n}; use counts from 1 to 64");
        }
        if self.rate == 0 || self.seconds == 0 {
            bail!("--rate and --seconds must be at least 1");
        }
        Ok(())
    }
}

/// Refuses `scenario` unless the scratch database is PostgreSQL.
fn require_postgres(db: &Scratch, scenario: Scenario) -> anyhow::Result<()> {
    if db.idem.store().backend() != idem_store::Backend::Postgres {
        bail!(
            "the {scenario} scenario runs on PostgreSQL (it measures several processes or \
             tables of millions of rows on one server); give --database-url postgres://…"
        );
    }
    Ok(())
}

/// `idem bench`: the scratch database is removed however the scenarios end: finished,
/// failed, or cut short by SIGINT or SIGTERM.
pub async fn run(mut args: BenchArgs) -> anyhow::Result<ExitCode> {
    args.validate().or_exit(Exit::Usage)?;
    let mut interrupt = Interrupt::listen()?;
    let query = format!("?synchronous={}", args.synchronous);
    let db = scratch::open(args.scratch.database_url.clone(), "bench", &query).await?;
    let bar = progress(&args);
    let measured = interrupt.run(measure(&db, &args, &bar)).await;
    match measured {
        Ok(Ok(_)) => bar.finish_and_clear(),
        _ => bar.abandon(),
    }
    let (backend, label) = (db.idem.store().backend(), db.label.clone());
    db.finish(args.scratch.keep).await;
    match measured {
        Ok(Ok(results)) => {
            report::print(&args, backend, &label, &results)?;
            Ok(ExitCode::SUCCESS)
        }
        Ok(Err(e)) => Err(e),
        Err(signal) => {
            eprintln!("idem bench: stopped by {signal}");
            Ok(signal.exit_code())
        }
    }
}

/// Fills the history if asked, then runs every scenario in turn.
async fn measure(db: &Scratch, args: &BenchArgs, bar: &ProgressBar) -> anyhow::Result<Vec<Figure>> {
    let mut results = Vec::new();
    if args.history > 0 {
        bar.set_message(format!(
            "filling history with {} finished jobs",
            args.history
        ));
        scenarios::fill_history(db, args.history, Duration::ZERO).await?;
    }
    for &scenario in &args.scenarios {
        bar.set_message(scenario.to_string());
        let mut figures = scenarios::run(db, args, scenario)
            .await
            .with_context(|| format!("scenario {scenario} failed"))?;
        bar.inc(1);
        results.append(&mut figures);
    }
    Ok(results)
}

fn progress(args: &BenchArgs) -> ProgressBar {
    let bar = crate::progress::with_template(
        args.scenarios.len() as u64,
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} scenarios: {msg}",
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// One measured figure.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// Which scenario.
    pub scenario: Scenario,
    /// What is measured, e.g. `jobs/s`.
    pub metric: String,
    /// The engine's figure.
    pub value: f64,
    /// The unit.
    pub unit: &'static str,
    /// The same statements without the engine, when meaningful (the ratio's).
    pub ceiling: Option<f64>,
    /// Further ceilings of the same figure, printed under it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub other_ceilings: Vec<OtherCeiling>,
    /// What the figure counts, for the reader.
    pub note: String,
}

/// A further ceiling of a figure: what it runs, and its value in the figure's unit.
#[derive(Debug, Clone, Serialize)]
pub struct OtherCeiling {
    /// What the ceiling runs.
    pub what: String,
    /// Its value.
    pub value: f64,
}

impl Figure {
    /// This figure with `ceiling` beside it.
    pub fn beside(mut self, ceiling: f64) -> Figure {
        self.ceiling = Some(ceiling);
        self
    }

    /// This figure with `note`.
    pub fn noted(mut self, note: String) -> Figure {
        self.note = note;
        self
    }

    /// The engine's share of the ceiling.
    pub fn ratio(&self) -> Option<f64> {
        self.ceiling.filter(|c| *c > 0.0).map(|c| self.value / c)
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::Scenario;

    #[test]
    fn a_scenario_prints_as_the_flag_and_the_json_name_it() {
        assert_eq!(Scenario::LatencyRemote.to_string(), "latency-remote");
        for s in Scenario::value_variants() {
            let json = serde_json::to_value(s).unwrap();
            assert_eq!(json, s.to_string());
            assert_eq!(Scenario::from_str(&s.to_string(), false), Ok(*s));
        }
    }
}
