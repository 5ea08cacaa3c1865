//! `idem demo`: the whole story on one machine, verified.
//!
//! It enqueues receipt mails and ledger transfers whose effects commit in the job's fenced
//! transaction, batches of shop tallies whose one successor totals the children's results,
//! and calls to two mock remotes (one honouring idempotency keys, one not)
//! through the built-in `http` kind, runs worker *processes*, kills one with SIGKILL and pauses another with
//! SIGSTOP for longer than its lease while they work, and then checks the database: every
//! job completed, one outbox row per order, every row written under the claim that
//! completed the job, every transfer posted once, every receipt numbered by the store
//! with no gap and no number twice, every order moved from `paid` to `receipted` once.
//! Every keyed call is applied once at its remote; unknown outcomes of unkeyed calls are
//! reconciled, and every key the unkeyed remote applied twice is marked `duplicate`. The
//! report counts what the fence refused along the way.
//!
//! The run is a pipeline of steps, one file each: `producer` enqueues, `fleet` runs the
//! worker processes (each one `child`, with the `handlers`), `remote` runs the mock
//! remotes, `chaos` kills and pauses the workers while it watches progress, `settle`
//! reconciles and audits, `verify` asks the database, `report` prints.

mod chaos;
mod child;
mod fleet;
mod handlers;
mod producer;
mod remote;
mod report;
mod settle;
mod verify;

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;

use crate::exit::{Exit, OrExit};
use crate::interrupt::Interrupt;
use crate::scratch::{self, Scratch, ScratchArgs};
pub use child::{DemoWorkerArgs, worker};
use fleet::Fleet;
pub use handlers::kinds;

/// The queue every demo job goes to and every demo worker serves.
const QUEUE: &str = "demo";

/// Arguments of `idem demo`.
#[derive(Args)]
pub struct DemoArgs {
    /// Jobs to enqueue
    #[arg(long, default_value_t = 3000)]
    jobs: usize,
    /// Worker processes running at once (at least 2 with chaos)
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Jobs each worker process runs at once
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Lease in milliseconds (short, so that the chaos resolves in seconds)
    #[arg(long, default_value_t = 1500)]
    lease_ms: u64,
    /// Simulated work per job before its effect transaction, in milliseconds
    #[arg(long, default_value_t = 20)]
    work_ms: u64,
    /// Do not kill or pause workers
    #[arg(long)]
    no_chaos: bool,
    #[command(flatten)]
    scratch: ScratchArgs,
}

impl DemoArgs {
    fn validate(&self) -> anyhow::Result<()> {
        if !(1..=1_000_000).contains(&self.jobs) {
            bail!("--jobs is {}; use 1 to 1000000", self.jobs);
        }
        let min_workers = if self.no_chaos { 1 } else { 2 };
        if !(min_workers..=32).contains(&self.workers) {
            bail!(
                "--workers is {}; use {min_workers} to 32 (chaos kills one worker and pauses \
                 another, so it needs at least 2; --no-chaos allows 1)",
                self.workers
            );
        }
        if !(1..=1000).contains(&self.concurrency) {
            bail!("--concurrency is {}; use 1 to 1000", self.concurrency);
        }
        if self.lease_ms < 300 {
            bail!("--lease-ms is {}; use at least 300", self.lease_ms);
        }
        Ok(())
    }
}

/// `idem demo`: its database and its worker processes are set up outside the run proper,
/// so that they are cleaned up however the run ends: finished, failed, or cut short by
/// SIGINT or SIGTERM.
pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    args.validate().or_exit(Exit::Usage)?;
    let mut interrupt = Interrupt::listen()?;
    let mut fleet = Fleet::new(&args)?;
    let db = scratch::open(args.scratch.database_url.clone(), "demo", "")
        .await
        .context("cannot set up the demo database")?;
    println!(
        "idem demo: {} jobs, {} worker processes × {} slots, lease {} ms",
        args.jobs, args.workers, args.concurrency, args.lease_ms
    );
    println!("database: {}", db.label);
    let outcome = interrupt.run(demonstrate(&args, &db, &mut fleet)).await;
    let killed = fleet.kill_all().await;
    db.finish(args.scratch.keep).await;
    match outcome {
        Ok(done) => done,
        Err(signal) => {
            let workers = match killed.is_empty() {
                true => "no worker process had started".to_owned(),
                false => format!("killed {}", killed.join(", ")),
            };
            eprintln!("idem demo: stopped by {signal}; {workers}");
            Ok(signal.exit_code())
        }
    }
}

/// The run proper: enqueue, start the workers, watch them with chaos until every job is
/// finished, stop them, check the database and print the report.
async fn demonstrate(args: &DemoArgs, db: &Scratch, fleet: &mut Fleet) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let remotes = remote::Remotes::start()?;
    let ids = producer::enqueue(&db.idem, args.jobs, &remotes).await?;
    fleet.start(&db.url, args.workers)?;
    let chaos = chaos::drive(&db.idem, args, fleet, ids).await;
    let settled = match &chaos {
        Ok(_) => settle::settle(&db.idem, ids, args.lease_ms).await,
        Err(_) => Ok(Default::default()),
    };
    let reports = fleet.stop().await;
    let (chaos, settled) = (chaos?, settled?);
    let verdict = verify::verify(&db.idem, ids).await?;
    let calls = remotes.check(&db.idem).await?;
    let found = report::Found {
        verdict: &verdict,
        calls: &calls,
        settled: &settled,
    };
    report::print(args, &chaos, &reports, &found, started.elapsed());
    Ok(if verdict.ok() && calls.ok() {
        ExitCode::SUCCESS
    } else {
        Exit::Refused.code()
    })
}
