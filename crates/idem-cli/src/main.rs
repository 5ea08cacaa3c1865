//! The `idem` binary: the only crate that reads flags and the environment.
//!
//! Commands parse their input into the library's types and print results; all behaviour
//! lives in the `idem` crate. `anyhow` is used here and nowhere else. One module per
//! command (`migrate`, `enqueue`, `jobs`, `queues`, `dead`, `ledger`, `guarantees`,
//! `config`, `worker`, `intents`, `reconcile`, `purge`, `completions`, `demo/`, `chaos/`,
//! `bench/`); the database they open (`database`), how they print (`output`, `table`,
//! `show`), how much they say (`verbosity`, `progress`), how bulk actions pick their jobs
//! (`bulk`) and how they exit (`exit`) are shared.

mod batches;
mod bench;
mod bulk;
mod chaos;
mod completions;
mod config;
mod database;
mod dead;
mod demo;
mod enqueue;
mod exit;
mod guarantees;
mod intents;
mod interrupt;
mod jobs;
mod ledger;
mod metrics_listen;
mod migrate;
mod otel;
mod output;
mod progress;
mod purge;
mod queues;
mod reconcile;
mod scratch;
mod serve;
mod show;
mod table;
mod verbosity;
mod worker;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::exit::Exit;

#[derive(Parser)]
#[command(
    name = "idem",
    version,
    about = "Durable background jobs whose effects happen once",
    after_help = exit::TABLE
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
    #[command(flatten)]
    verbosity: verbosity::Verbosity,
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
    /// Run every effect class under real faults (killed, paused and zombie workers; on a
    /// PostgreSQL of its own, a restarted server and killed connections) and count what
    /// went wrong with an independent checker; exit 1 when it found anything
    ///
    /// It runs in a temporary SQLite file, never in the database of IDEM_DATABASE_URL;
    /// --own-postgres starts a PostgreSQL server of its own, --database-url chooses another.
    Chaos(chaos::ChaosArgs),
    /// Create the database if needed and apply pending migrations, saying which first;
    /// --status lists them without applying any
    ///
    /// The only command that creates a database or changes its schema: every other one
    /// opens the database that exists, refuses a missing one (exit 3) and one whose
    /// schema is not this build's (exit 6).
    Migrate(migrate::MigrateArgs),
    /// Enqueue one job: any kind (--kind, --args), or `idem enqueue http …`
    Enqueue(enqueue::EnqueueArgs),
    /// Serve the HTTP API (and the built-in kinds' worker) until SIGTERM or SIGINT
    ///
    /// Tokens come from [[api.tokens]] in the config file and IDEM_API_TOKENS
    /// (principal=token,…; IDEM_API_OPERATORS names the operator principals). --dev serves
    /// without authentication, on loopback only.
    Serve(serve::ServeArgs),
    /// Run the built-in job kinds (http) on the given queues until SIGTERM or SIGINT,
    /// reconciling their unknown calls every --reconcile-every
    Worker(worker::WorkerCommand),
    /// List, show and cancel jobs
    #[command(subcommand)]
    Jobs(jobs::JobsCommand),
    /// Create, add to, seal, list and show batches: child jobs whose last one to finish
    /// enqueues one successor
    #[command(subcommand)]
    Batches(batches::BatchesCommand),
    /// Job counts per queue and state, the waiting jobs per kind, and the paused queues;
    /// pause and resume a queue
    ///
    /// A paused queue is claimed from by no worker, in any process, until it is resumed;
    /// enqueues into it go on and jobs already running finish.
    Queues(queues::QueuesArgs),
    /// List, inspect, retry and discard dead jobs
    ///
    /// retry and discard act on the listed ids they can and name the others: an id that
    /// does not exist makes them exit 3; a job that is not dead (for retry: nor
    /// cancelled) is left alone and makes them exit 1.
    #[command(subcommand)]
    Dead(dead::DeadCommand),
    /// List, inspect and settle intents: the records of calls to other services
    ///
    /// resolve settles an unknown or manual intent by hand (exit 3 for a key that does
    /// not exist, 1 for an intent in another state).
    #[command(subcommand)]
    Intents(intents::IntentsCommand),
    /// Look unknown calls of the built-in kinds up on their remote once and settle them;
    /// exit 1 when a duplicate or a manual one was found
    Reconcile(reconcile::ReconcileArgs),
    /// Delete records past their retention (enqueue keys, effect keys, finished and dead
    /// jobs), in batches
    Purge(purge::PurgeArgs),
    /// Check the ledger's running totals against its entries, and rebuild them
    #[command(subcommand)]
    Ledger(ledger::LedgerCommand),
    /// What idem guarantees for each effect class and each job kind this binary runs
    Guarantees(output::Format),
    /// Check the config file: retry ladders, the retry horizon and retention windows
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Print the completion script of a shell (bash, zsh, fish, elvish, powershell)
    Completions(completions::CompletionsArgs),
    /// Worker process used by `idem demo` and `idem chaos` (not for direct use)
    #[command(hide = true)]
    ChaosWorker(chaos::ChaosWorkerArgs),
    /// The remote service (sink) process used by `idem demo` and `idem chaos` (not for
    /// direct use)
    #[command(hide = true)]
    ChaosSink(chaos::ChaosSinkArgs),
    /// The producer process of `idem bench`'s latency-remote scenario (not for direct use)
    #[command(hide = true)]
    BenchProducer(bench::ProducerArgs),
    /// A worker process of `idem bench`'s scale scenario (not for direct use)
    #[command(hide = true)]
    BenchWorker(bench::ScaleWorkerArgs),
}

/// Runs the command; an error is printed on stderr and exits with its class's code
/// ([`Exit::of`]).
fn main() -> ExitCode {
    let cli = Cli::parse();
    end_quietly_on_a_closed_pipe(&cli.command);
    // Dropped last, after the runtime: flushes the OpenTelemetry export (`otel` feature).
    let _otel = init_tracing(&cli);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return Exit::Internal.code();
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            Exit::of(&e).code()
        }
    }
}

/// A command that prints and ends (a list, a show, an action's summary) exits quietly
/// when its reader closes the pipe (`idem queues | head -1`), as Unix tools do, instead
/// of panicking on the failed write: SIGPIPE back to its default. The long-running
/// commands keep Rust's default (ignored, so a write fails with an error instead): a
/// server or a process with child processes must not die of a peer that went away.
fn end_quietly_on_a_closed_pipe(command: &Command) {
    let long_running = matches!(
        command,
        Command::Demo(_)
            | Command::Bench(_)
            | Command::Chaos(_)
            | Command::ChaosWorker(_)
            | Command::ChaosSink(_)
            | Command::Worker(_)
            | Command::Serve(_)
    );
    if !long_running {
        // SAFETY: signal(2) with SIG_DFL, before any thread is started.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let db = || database::url(cli.database_url.clone());
    match cli.command {
        Command::Demo(args) => demo::run(args).await,
        Command::Bench(args) => bench::run(args).await,
        Command::Chaos(args) => chaos::run(args).await,
        Command::ChaosWorker(args) => chaos::worker_process(args, db()).await,
        Command::ChaosSink(args) => chaos::sink_process(args).await,
        Command::BenchProducer(args) => bench::produce(&db(), args).await,
        Command::BenchWorker(args) => bench::bench_worker(&db(), args).await,
        Command::Migrate(args) => migrate::run(&db(), args).await,
        Command::Enqueue(args) => enqueue::run(&db(), args).await,
        Command::Worker(args) => worker::run(&db(), args).await,
        Command::Serve(args) => serve::run(&db(), args).await,
        Command::Intents(cmd) => intents::run(&db(), cmd).await,
        Command::Reconcile(args) => reconcile::run(&db(), args).await,
        Command::Jobs(cmd) => jobs::run(&db(), cmd).await,
        Command::Batches(cmd) => batches::run(&db(), cmd).await,
        Command::Queues(args) => queues::run(&db(), args).await,
        Command::Dead(cmd) => dead::dead(&db(), cmd).await,
        Command::Purge(args) => purge::run(&db(), args).await,
        Command::Ledger(cmd) => ledger::run(&db(), cmd).await,
        Command::Guarantees(format) => guarantees::run(&chaos::kinds()?, format),
        Command::Config(cmd) => config::run(cmd),
        Command::Completions(args) => completions::run(args, Cli::command()),
    }
}

/// Logs to stderr, filtered by `-v`/`-q`, else `IDEM_LOG`, else by default warnings
/// without sqlx's notices about dropped connections (the store reports its errors
/// itself); a chaos run or the demo also leaves out by default the warnings its own
/// faults cause on purpose (late duplicates found by the audit), which its report counts.
/// Beside it, with the `otel` feature, spans go to an OpenTelemetry collector
/// (`otel.rs`), filtered on their own.
fn init_tracing(cli: &Cli) -> otel::Guard {
    let default = match cli.command {
        Command::Demo(_) | Command::Chaos(_) => "warn,sqlx=error,idem::intent=error",
        _ => "warn,sqlx=error",
    };
    cli.verbosity.install(default)
}
