//! The `idem` binary: the only crate that reads flags and the environment.
//!
//! Commands parse their input into the library's types and print results; all behaviour
//! lives in the `idem` crate. `anyhow` is used here and nowhere else.

mod bench;
mod config;
mod dead;
mod demo;
mod interrupt;
mod ops;
mod scratch;

use clap::{Parser, Subcommand};

/// Default database when neither `--database-url` nor `IDEM_DATABASE_URL` is given.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://idem.db";
/// The environment variable naming the database of the operator commands.
const DATABASE_URL_ENV: &str = "IDEM_DATABASE_URL";

#[derive(Parser)]
#[command(
    name = "idem",
    version,
    about = "Durable background jobs whose effects happen once"
)]
struct Cli {
    /// sqlite://path or postgres://user@host:port/db [default: $IDEM_DATABASE_URL, else
    /// sqlite://idem.db]
    ///
    /// demo and bench never read IDEM_DATABASE_URL: without a URL on their command line
    /// they work on scratch data (see their --help)
    // Not `env = …`: clap would hand the variable's value to demo's and bench's own
    // `database_url` too, and they must never be sent into a database by the environment.
    #[arg(long, global = true, value_name = "URL")]
    database_url: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the demonstration: jobs, worker processes killed and paused, a verified report
    ///
    /// It runs in a temporary SQLite file, never in the database of IDEM_DATABASE_URL;
    /// --database-url on its command line chooses another (see below).
    Demo(demo::DemoArgs),
    /// Measure throughput, latency and memory against a ceiling measured in the same run
    ///
    /// It runs in a temporary SQLite file, never in the database of IDEM_DATABASE_URL;
    /// --database-url on its command line chooses another (see below).
    Bench(bench::BenchArgs),
    /// Apply pending migrations
    Migrate,
    /// Enqueue one job
    Enqueue(ops::EnqueueArgs),
    /// List, show and cancel jobs
    #[command(subcommand)]
    Jobs(ops::JobsCommand),
    /// Job counts per queue and state
    Queues,
    /// List, inspect, retry and discard dead jobs
    #[command(subcommand)]
    Dead(dead::DeadCommand),
    /// Delete records past their retention (enqueue keys, effect keys, finished and dead
    /// jobs), in batches
    Purge(dead::PurgeArgs),
    /// Check the ledger's running totals against its entries, and rebuild them
    #[command(subcommand)]
    Ledger(ops::LedgerCommand),
    /// What idem guarantees for each effect class and each job kind this binary runs
    Guarantees,
    /// Check the config file: retry ladders, the retry horizon and retention windows
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Worker process used by `idem demo` (not for direct use)
    #[command(hide = true)]
    DemoWorker(demo::DemoWorkerArgs),
}

fn main() -> std::process::ExitCode {
    init_tracing();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    let url = cli.database_url.clone();
    let db = || {
        url.clone()
            .or_else(|| std::env::var(DATABASE_URL_ENV).ok())
            .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned())
    };
    match cli.command {
        Command::Demo(args) => demo::run(args).await,
        Command::Bench(args) => bench::run(args).await,
        Command::DemoWorker(args) => demo::worker(args, db()).await,
        Command::Migrate => ops::migrate(&db()).await,
        Command::Enqueue(args) => ops::enqueue(&db(), args).await,
        Command::Jobs(cmd) => ops::jobs(&db(), cmd).await,
        Command::Queues => ops::queues(&db()).await,
        Command::Dead(cmd) => dead::dead(&db(), cmd).await,
        Command::Purge(args) => dead::purge(&db(), args).await,
        Command::Ledger(cmd) => ops::ledger(&db(), cmd).await,
        Command::Guarantees => Ok(ops::guarantees(&demo::kinds()?)),
        Command::Config(cmd) => config::run(cmd),
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("IDEM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
