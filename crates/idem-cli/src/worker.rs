//! `idem worker`: runs the job kinds idem provides (`http`) in a process of its own, on
//! the queues given, until SIGTERM or SIGINT; beside it, a reconciliation pass of those
//! kinds every `--reconcile-every`. Also the one registration of the built-in kinds,
//! which `idem reconcile` shares. With `--metrics-listen ADDR` it serves its metrics
//! (`metrics_listen.rs`). On PostgreSQL its pool is `--pool-size`, else `[worker]
//! pool_size`, else sized to its jobs and capped ([`pool_size`], which `idem serve`
//! shares).
//!
//! What must stay true: the database is opened, never created or migrated; the worker's
//! settings come from the config file (`config.rs`) and pass the same checks as every
//! worker's before the database is opened; the stop signals are listened for before the
//! worker starts, so a signal at any moment ends it gracefully (running jobs get the
//! shutdown timeout) and the process exits 0 with a one-line summary (none with `-q`).
//! A reconciliation pass under way when the signal arrives is let finish: stopping it
//! between settling an intent and retrying its job would leave that job dead.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use idem::builtin::{Http, HttpConfig};
use idem::intent::{ReconcileOptions, Reconciler};
use idem::{Idem, Worker, WorkerConfig, WorkerReport};
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

use crate::config::CliConfig;
use crate::database;
use crate::exit::{Exit, OrExit};
use crate::interrupt::Interrupt;
use crate::metrics_listen::MetricsListener;
use crate::reconcile;

/// Jobs each queue runs at once when `--concurrency` is not given (the library's default).
const DEFAULT_CONCURRENCY: usize = 10;
/// The most connections a worker process opens to PostgreSQL by default (`[worker]
/// pool_size` and `--pool-size` set any number). A pool sized to the jobs alone
/// (`--concurrency 1000`: over 1,000 connections) has the server refuse connections under
/// load ("too many clients") where jobs should wait for one. 60 leaves room in
/// PostgreSQL's default `max_connections` (100) for a default `idem worker` (25) beside
/// `idem serve`, and for `psql`.
pub(crate) const MAX_DEFAULT_POOL: u32 = 60;
/// How the command line sizes the pool, as a worker's pool check names it.
const POOL_SETTING: &str = "--pool-size or [worker] pool_size";

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
    /// Connections to PostgreSQL, over the config file's `[worker] pool_size` [default: the
    /// jobs at once + 8 for transactions, with the claim and engine pools' share on top,
    /// at least 25 (idem serve: + up to 64 for requests), at most 60]; SQLite ignores it
    #[arg(long, value_parser = pool_size_flag, value_name = "N")]
    pub(crate) pool_size: Option<NonZeroU32>,
}

/// `--pool-size`: 1 or more.
fn pool_size_flag(text: &str) -> anyhow::Result<NonZeroU32> {
    crate::config::pool_size("--pool-size", text.parse()?)
}

/// Arguments of `idem worker` alone (`idem serve` shares [`WorkerArgs`]).
#[derive(Args)]
pub struct WorkerCommand {
    #[command(flatten)]
    pub(crate) worker: WorkerArgs,
    /// Serve GET /metrics (Prometheus text, no authentication) on this address
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_listen: Option<SocketAddr>,
}

/// Registers the job kinds idem provides on `worker`: `http`, with the default
/// [`HttpConfig`] (the config file has no section for it).
pub fn register_builtins(worker: &mut Worker) -> anyhow::Result<()> {
    worker.register(Http::new(HttpConfig::default())?)?;
    Ok(())
}

/// The PostgreSQL connections of a process running `config`'s worker, with `extra` for
/// what else it serves (`idem serve`'s requests): `pool_size` when set; else enough that
/// the store's pool for transactions ([`idem_postgres::Budget`]) has one connection for
/// every job at once, the worker's own duties and one reconciliation pass (never below
/// the library's default), plus `extra`, at most [`MAX_DEFAULT_POOL`]. When the cap
/// leaves fewer than the worker wants, its pool check warns with the way out.
pub(crate) fn pool_size(config: &CliConfig, extra: u32) -> u32 {
    if let Some(n) = config.pool_size {
        return n.get();
    }
    let jobs: usize = config.worker.queues.values().sum();
    let worker = u32::try_from(jobs)
        .unwrap_or(u32::MAX)
        .saturating_add(idem::WORKER_CONNECTIONS + 1);
    idem_postgres::Budget::total_for(worker.saturating_add(extra))
        .clamp(idem_postgres::DEFAULT_MAX_CONNECTIONS, MAX_DEFAULT_POOL)
}

/// The fewest PostgreSQL connections a worker accepts: its own duties and one job in the
/// pool for transactions, after the claim and engine pools' share.
pub(crate) fn smallest_pool() -> u32 {
    idem_postgres::Budget::total_for(idem::WORKER_CONNECTIONS + 1)
}

/// How long a transaction of a worker process may sit idle (PostgreSQL): its lease, at
/// least 1 s and at most the library's default. Past its lease a stalled transaction's
/// job is another worker's anyway; the built-in handlers keep nothing open that long.
pub(crate) fn idle_timeout(lease: std::time::Duration) -> std::time::Duration {
    let default = idem_postgres::DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT;
    lease.clamp(std::time::Duration::from_secs(1), default)
}

/// The rule of [`pool_size`] without a setting, for people.
pub(crate) fn default_pool() -> String {
    format!(
        "the jobs at once + {} for transactions, with the claim and engine pools' share on \
         top, at least {} (idem serve: + up to {} for requests), at most {} (PostgreSQL)",
        idem::WORKER_CONNECTIONS + 1,
        idem_postgres::DEFAULT_MAX_CONNECTIONS,
        crate::serve::REQUEST_CONNECTIONS,
        MAX_DEFAULT_POOL
    )
}

/// The existing database at `url` for a process running `config`'s worker: its pool
/// ([`pool_size`] with `extra`), its transactions' idle timeout ([`idle_timeout`]),
/// retention and horizon, and the pool check naming the command line's setting.
pub(crate) async fn open(url: &str, config: &CliConfig, extra: u32) -> anyhow::Result<Idem> {
    let mut options = idem::ConnectOptions::default();
    options.postgres.max_connections = pool_size(config, extra);
    options.postgres.idle_in_transaction_timeout = idle_timeout(config.worker.lease);
    Ok(database::open_with(url, options)
        .await?
        .with_retention(config.retention)?
        .with_horizon(config.horizon())
        .with_pool_setting(POOL_SETTING))
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
pub async fn run(url: &str, c: WorkerCommand) -> anyhow::Result<ExitCode> {
    let a = c.worker;
    let queues = queues(&a)?;
    let config = settings(&a, queues)?;
    let idem = open(url, &config, 0).await?;
    let mut worker = idem.worker(config.worker.clone())?;
    register_builtins(&mut worker)?;
    register_periodic(&mut worker, &config)?;
    let started = started(&worker, &config, url, a.reconcile_every);
    let metrics = match c.metrics_listen {
        Some(addr) => Some(MetricsListener::start(&idem, addr).await?),
        None => None,
    };
    let report = serve(worker, a.reconcile_every, &started).await?;
    if let Some(metrics) = metrics {
        metrics.stop().await;
    }
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

/// The config file's settings with the flags' queues and pool size, checked as
/// `Idem::worker` checks them (a refusal is a bad configuration, exit 5).
pub(crate) fn settings(
    a: &WorkerArgs,
    queues: BTreeMap<String, usize>,
) -> anyhow::Result<CliConfig> {
    let mut config = CliConfig::load(a.config.as_deref()).or_exit(Exit::Config)?;
    config.worker.queues = queues;
    config.pool_size = a.pool_size.or(config.pool_size);
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
    use clap::Parser;
    use idem::WORKER_CONNECTIONS;

    use super::*;

    /// `idem worker`'s flags alone.
    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        worker: WorkerArgs,
    }

    fn flags(args: &[&str]) -> Result<WorkerArgs, clap::Error> {
        let all = std::iter::once("idem-worker").chain(args.iter().copied());
        Flags::try_parse_from(all).map(|f| f.worker)
    }

    /// The defaults with one queue of `concurrency` and `pool_size` set or not.
    fn config(concurrency: usize, pool_size: Option<u32>) -> CliConfig {
        CliConfig {
            worker: WorkerConfig::default().only_queue("q", concurrency),
            pool_size: pool_size.and_then(NonZeroU32::new),
            ..CliConfig::default()
        }
    }

    #[test]
    fn the_default_pool_serves_every_job_and_the_workers_duties() {
        use idem_postgres::Budget;
        let floor = idem_postgres::DEFAULT_MAX_CONNECTIONS;
        assert_eq!(pool_size(&config(4, None), 0), floor);
        let pool = pool_size(&config(30, None), 0);
        let transactions = Budget::of(pool).transactions;
        assert_eq!(pool, Budget::total_for(30 + WORKER_CONNECTIONS + 1));
        assert!(transactions > 30 + WORKER_CONNECTIONS, "{pool}");
        let worker = config(30, None).worker;
        worker
            .check_connections(Some(transactions), Budget::total_for, POOL_SETTING)
            .unwrap();
        // idem serve: its requests' share on top.
        assert_eq!(
            pool_size(&config(4, None), 10),
            Budget::total_for(4 + WORKER_CONNECTIONS + 1 + 10)
        );
    }

    #[test]
    fn a_worker_s_transactions_idle_for_at_most_its_lease_within_bounds() {
        let ms = std::time::Duration::from_millis;
        assert_eq!(idle_timeout(ms(1_500)), ms(1_500));
        assert_eq!(idle_timeout(ms(200)), ms(1_000));
        assert_eq!(
            idle_timeout(ms(30_000)),
            idem_postgres::DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT
        );
    }

    #[test]
    fn the_default_pool_is_capped_at_postgresqls_default_max_connections() {
        assert_eq!(pool_size(&config(1000, None), 0), MAX_DEFAULT_POOL);
        assert_eq!(pool_size(&config(50, None), 64), MAX_DEFAULT_POOL);
        assert_eq!(pool_size(&config(10_000, None), u32::MAX), MAX_DEFAULT_POOL);
    }

    #[test]
    fn a_set_pool_size_is_the_pool_whatever_the_jobs() {
        assert_eq!(pool_size(&config(1000, Some(300)), 0), 300);
        assert_eq!(pool_size(&config(50, Some(9)), 64), 9);
        let worker = config(50, None).worker;
        let total_for = idem_postgres::Budget::total_for;
        let err = worker.check_connections(Some(5), total_for, POOL_SETTING);
        let err = err.unwrap_err().to_string();
        assert!(
            err.contains("raise --pool-size or [worker] pool_size to 69 or more"),
            "{err}"
        );
    }

    #[test]
    fn a_pool_size_of_zero_is_refused_naming_the_key_or_the_flag() {
        let err = CliConfig::parse("[worker]\npool_size = 0\n").unwrap_err();
        let err = format!("{err:#}");
        assert!(err.contains("worker.pool_size is 0"), "{err}");
        let err = flags(&["--pool-size", "0"])
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("--pool-size is 0"), "{err}");
        let c = CliConfig::parse("[worker]\npool_size = 40\n").unwrap();
        assert_eq!(c.pool_size, NonZeroU32::new(40));
    }

    #[test]
    fn the_flag_overrides_the_config_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("idem.toml");
        std::fs::write(&file, "[worker]\npool_size = 30\n").unwrap();
        let file = file.to_str().unwrap();
        let from_file = flags(&["--config", file]).unwrap();
        let c = settings(&from_file, queues(&from_file).unwrap()).unwrap();
        assert_eq!(pool_size(&c, 0), 30);
        let flagged = flags(&["--config", file, "--pool-size", "50"]).unwrap();
        let c = settings(&flagged, queues(&flagged).unwrap()).unwrap();
        assert_eq!(pool_size(&c, 0), 50);
    }
}
