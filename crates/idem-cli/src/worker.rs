//! `idem worker`: runs the job kinds idem provides (`http`) in a process of its own, on
//! the queues given, until SIGTERM or SIGINT; beside it, a reconciliation pass of those
//! kinds every `--reconcile-every`. Also the one registration of the built-in kinds,
//! which `idem reconcile` shares.
//!
//! What must stay true: the database is opened, never created or migrated; the worker's
//! settings come from the config file (`config.rs`) and pass the same checks as every
//! worker's before the database is opened; the stop signals are listened for before the
//! worker starts, so a signal at any moment ends it gracefully (running jobs get the
//! shutdown timeout) and the process exits 0 with a one-line summary (none with `-q`).
//! A reconciliation pass under way when the signal arrives is let finish: stopping it
//! between settling an intent and retrying its job would leave that job dead.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use idem::builtin::{Http, HttpConfig};
use idem::intent::{ReconcileOptions, Reconciler};
use idem::{Worker, WorkerConfig, WorkerReport};
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

use crate::config::CliConfig;
use crate::database;
use crate::exit::{Exit, OrExit};
use crate::interrupt::Interrupt;
use crate::reconcile;

/// Jobs each queue runs at once when `--concurrency` is not given (the library's default).
const DEFAULT_CONCURRENCY: usize = 10;

/// Arguments of `idem worker`.
#[derive(Args)]
pub struct WorkerArgs {
    /// A queue to serve (repeat for several) [default: default]
    #[arg(long = "queue", value_name = "Q")]
    pub(crate) queues: Vec<String>,
    /// Jobs of each queue that run at once
    #[arg(long, default_value_t = DEFAULT_CONCURRENCY, value_name = "N")]
    pub(crate) concurrency: usize,
    /// Config file: retry ladders, lease, job timeout, retention (default: ./idem.toml if
    /// present; else the built-in defaults)
    #[arg(long, env = "IDEM_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// How often to reconcile the built-in kinds' unknown intents (and audit completed
    /// unkeyed calls), as `idem reconcile` does with its defaults; 0 disables
    #[arg(long, default_value = "1m", value_parser = reconcile::duration, value_name = "DUR")]
    pub(crate) reconcile_every: Duration,
}

/// Registers the job kinds idem provides on `worker`: `http`, with the default
/// [`HttpConfig`] (the config file has no section for it).
pub fn register_builtins(worker: &mut Worker) -> anyhow::Result<()> {
    worker.register(Http::new(HttpConfig::default())?)?;
    Ok(())
}

/// The store settings of a worker: on PostgreSQL, a pool that serves every job at once
/// plus the worker's own duties and one reconciliation pass (never below the default).
pub(crate) fn connect_options(worker: &WorkerConfig) -> idem::ConnectOptions {
    let jobs: usize = worker.queues.values().sum();
    let wanted = u32::try_from(jobs)
        .unwrap_or(u32::MAX)
        .saturating_add(idem::WORKER_CONNECTIONS + 1);
    let mut options = idem::ConnectOptions::default();
    options.postgres.max_connections = options.postgres.max_connections.max(wanted);
    options
}

/// The config file's `[[periodic]]` schedules, run by `worker` (each tick enqueued once
/// however many processes run them).
pub fn register_periodic(worker: &mut Worker, config: &CliConfig) -> anyhow::Result<()> {
    for p in config.schedules()? {
        worker.periodic(p)?;
    }
    Ok(())
}

/// `idem worker`: runs until SIGTERM or SIGINT, then prints what it did.
pub async fn run(url: &str, a: WorkerArgs) -> anyhow::Result<ExitCode> {
    let queues = queues(&a)?;
    let config = settings(&a, queues)?;
    let idem = database::open_with(url, connect_options(&config.worker))
        .await?
        .with_retention(config.retention)?
        .with_horizon(config.horizon());
    let mut worker = idem.worker(config.worker.clone())?;
    register_builtins(&mut worker)?;
    register_periodic(&mut worker, &config)?;
    let started = started(&worker, &config, url, a.reconcile_every);
    let report = serve(worker, a.reconcile_every, &started).await?;
    crate::verbosity::say(report);
    Ok(ExitCode::SUCCESS)
}

/// Starts `worker` (and its reconciliation passes, unless `every` is zero), prints
/// `started` once it serves its queues, and stops both at SIGTERM or SIGINT; the summary
/// of what the worker did.
async fn serve(worker: Worker, every: Duration, started: &str) -> anyhow::Result<String> {
    let reconciler = worker.reconciler();
    let mut interrupt = Interrupt::listen()?;
    let running = worker.start();
    let (stop, stopped) = watch::channel(false);
    let passes =
        (!every.is_zero()).then(|| tokio::spawn(reconcile_every(reconciler, every, stopped)));
    let forever = std::future::pending::<std::convert::Infallible>();
    let signal = match interrupt.run(running.ready()).await {
        Ok(()) => {
            crate::verbosity::say(started);
            match interrupt.run(forever).await {
                Ok(never) => match never {},
                Err(signal) => signal,
            }
        }
        Err(signal) => signal,
    };
    let _ = stop.send(true);
    let (report, _) = tokio::join!(running.shutdown(), async {
        if let Some(passes) = passes {
            let _ = passes.await;
        }
    });
    Ok(format!(
        "idem worker stopped by {signal}: {}",
        summary(&report)
    ))
}

/// The queues of the flags with their concurrency, checked as a worker checks them: a
/// bad name or concurrency is the command line's fault (exit 2).
pub(crate) fn queues(a: &WorkerArgs) -> anyhow::Result<BTreeMap<String, usize>> {
    let names = match a.queues.is_empty() {
        // The library's default queue.
        true => WorkerConfig::default().queues.into_keys().collect(),
        false => a.queues.clone(),
    };
    let queues: BTreeMap<String, usize> = names.into_iter().map(|q| (q, a.concurrency)).collect();
    let config = WorkerConfig {
        queues: queues.clone(),
        ..WorkerConfig::default()
    };
    config.validate().or_exit(Exit::Usage)?;
    Ok(queues)
}

/// The config file's settings with the flags' queues, checked as `Idem::worker` checks
/// them (a refusal is a bad configuration, exit 5).
pub(crate) fn settings(
    a: &WorkerArgs,
    queues: BTreeMap<String, usize>,
) -> anyhow::Result<CliConfig> {
    let mut config = CliConfig::load(a.config.as_deref()).or_exit(Exit::Config)?;
    config.worker.queues = queues;
    config.check().or_exit(Exit::Config)?;
    Ok(config)
}

/// A pass every `every` (the first one `every` after the start) until `stop` is sent; a
/// pass that changed something is printed, one that failed is reported on stderr.
pub(crate) async fn reconcile_every(
    reconciler: Reconciler,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval_at(Instant::now() + every, every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = ticks.tick() => {}
        }
        match reconciler.run(ReconcileOptions::default()).await {
            Ok(r) if reconcile::changed_anything(&r) => {
                crate::verbosity::say(format!("reconcile: {}", reconcile::summary(&r)));
            }
            Ok(_) => {}
            Err(e) => eprintln!(
                "reconcile failed (next pass in {}): {e}",
                idem::config::human(every)
            ),
        }
    }
}

/// The line printed once the worker serves its queues.
fn started(worker: &Worker, config: &CliConfig, url: &str, every: Duration) -> String {
    let kinds: Vec<String> = worker.kinds().into_iter().map(|(k, _)| k).collect();
    let queues: Vec<String> = (config.worker.queues.iter())
        .map(|(q, n)| format!("{q} ({n} at once)"))
        .collect();
    let reconcile = match every.is_zero() {
        true => "no reconciliation (--reconcile-every 0)".to_owned(),
        false => format!("reconciling every {}", idem::config::human(every)),
    };
    format!(
        "idem worker {}: kinds {} on queues {}, {reconcile}, database {}; stop with SIGTERM \
         or Ctrl-C",
        worker.name(),
        kinds.join(", "),
        queues.join(", "),
        idem_postgres::redact(url)
    )
}

/// What a worker did, on one line.
pub(crate) fn summary(r: &WorkerReport) -> String {
    format!(
        "claimed {}, completed {}, retried {}, snoozed {}, dead {}, lease lost {}, panicked \
         {}, timed out {}, rescued {}",
        r.claimed,
        r.completed,
        r.retried,
        r.snoozed,
        r.dead,
        r.lease_lost,
        r.panicked,
        r.timed_out,
        r.rescued
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_pool_serves_every_job_and_the_workers_duties() {
        let small = super::WorkerConfig::default().only_queue("q", 4);
        let default = idem::ConnectOptions::default().postgres.max_connections;
        assert_eq!(
            super::connect_options(&small).postgres.max_connections,
            default
        );
        let big = super::WorkerConfig::default().only_queue("q", 50);
        let pool = super::connect_options(&big).postgres.max_connections;
        assert_eq!(pool, 50 + idem::WORKER_CONNECTIONS + 1);
        big.check_connections(Some(pool))
            .expect("enough for every job at once");
    }
}
