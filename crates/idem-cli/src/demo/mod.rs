//! `idem demo`: the whole story on one machine, verified, in well under a minute.
//!
//! It is a chaos run ([`crate::chaos`]) sized to show rather than to soak: every effect
//! class (receipt mails with a guarded transition and a store-assigned number, ledger
//! transfers, notes fenced by their claim alone, pings completed in batches, chains,
//! batches with fan-in, keyed and unkeyed calls to a remote service in a process of its
//! own), worker processes killed and paused mid-job, and the independent checker's report.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use clap::Args;

use crate::chaos::{self, FleetArgs, Plan};
use crate::exit::{Exit, OrExit};
use crate::scratch::ScratchArgs;

/// Arguments of `idem demo`.
#[derive(Args)]
pub struct DemoArgs {
    /// Jobs to enqueue
    #[arg(long, default_value_t = 3000)]
    jobs: usize,
    #[command(flatten)]
    fleet: FleetArgs,
    /// Do not kill or pause workers
    #[arg(long)]
    no_chaos: bool,
    #[command(flatten)]
    scratch: ScratchArgs,
}

impl DemoArgs {
    fn plan(self) -> anyhow::Result<Plan> {
        if !(1..=1_000_000).contains(&self.jobs) {
            bail!("--jobs is {}; use 1 to 1000000", self.jobs);
        }
        self.fleet.validate(!self.no_chaos)?;
        let faults = |n: usize| if self.no_chaos { 0 } else { n };
        // Long enough for the faults to find work (the second zombie waits for the first
        // to be taken over, which may take a few leases, and must still find jobs to
        // hold); without them, as fast as it goes.
        let seconds = self.jobs as f64 / 200.0;
        Ok(Plan {
            jobs: self.jobs,
            duration: Duration::from_secs_f64(if self.no_chaos {
                seconds
            } else {
                seconds.max(20.0)
            }),
            fleet: self.fleet,
            kills: faults(3),
            zombies: faults(2),
            terminations: 0,
            restarts: 0,
            own_postgres: false,
            failover: None,
            scratch: self.scratch,
        })
    }
}

/// `idem demo`.
pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let plan = args.plan().or_exit(Exit::Usage)?;
    println!(
        "idem demo: {} jobs of every effect class, {} worker processes × {} slots, lease {} ms; \
         {} workers will be killed and {} paused past their lease",
        plan.jobs,
        plan.fleet.workers,
        plan.fleet.concurrency,
        plan.fleet.lease_ms,
        plan.kills,
        plan.zombies
    );
    chaos::run_plan(&plan).await
}
