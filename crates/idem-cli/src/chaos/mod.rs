//! `idem chaos`: every effect class under real faults, counted by an independent checker.
//!
//! A producer enqueues a workload of every effect class ([`workload`]) over the run and
//! logs what it asked for ([`asked`]); worker processes ([`fleet`], each a [`worker`])
//! run it, calling a sink process ([`sink`], the mock remote) that journals every copy it
//! applies; the fault driver ([`faults`]) SIGKILLs workers, SIGSTOPs them past their lease
//! and, on a PostgreSQL of the run's own ([`postgres`]), kills backend connections,
//! restarts the server and, with a standby, fails over to it ([`failover`]); then unknown outcomes are reconciled ([`settle`]) and the checker
//! ([`check`]) counts from the log, the journals and the database what went wrong.
//! `idem demo` is the same run, smaller, with a report in plain words.

mod asked;
pub(crate) mod check;
mod failover;
mod faults;
mod fleet;
pub(crate) mod orphan;
mod postgres;
mod producer;
mod report;
mod settle;
mod sink;
mod worker;
mod workload;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use idem::builtin::{Http, HttpConfig};
use idem::intent::ReconcileReport;

use crate::exit::{Exit, OrExit};
use crate::interrupt::Interrupt;
use crate::scratch::{self, ScratchArgs};
use failover::Cluster;
use fleet::Fleet;
use producer::{Produced, Requests, Urls};
use sink::{Sink, SinkFaults};

pub(crate) use sink::{ChaosSinkArgs, run as sink_process};
pub(crate) use worker::{ChaosWorkerArgs, run as worker_process};
pub use workload::kinds;

/// The queue every job of the run goes to and every worker serves.
const QUEUE: &str = "chaos";

/// The built-in `http` kind as the run's workers and its reconciler run it: calls time
/// out well inside the short lease, so that faults resolve in seconds.
fn remote_kind(lease_ms: u64) -> anyhow::Result<Http> {
    Ok(Http::new(HttpConfig {
        call_timeout: Duration::from_millis(lease_ms / 3),
        lease: Duration::from_millis(lease_ms),
        ..HttpConfig::default()
    })?)
}

/// The worker processes of a run, as `idem chaos` and `idem demo` take them.
#[derive(Args)]
pub(crate) struct FleetArgs {
    /// Worker processes running at once (at least 2 with faults: a kill or a pause must
    /// leave one running)
    #[arg(long, default_value_t = 4)]
    pub(crate) workers: usize,
    /// Jobs each worker process runs at once
    #[arg(long, default_value_t = 8)]
    pub(crate) concurrency: usize,
    /// Lease in milliseconds (short, so that faults resolve in seconds)
    #[arg(long, default_value_t = 1500)]
    pub(crate) lease_ms: u64,
    /// Simulated work per job before its effect transaction, in milliseconds
    #[arg(long, default_value_t = 20)]
    pub(crate) work_ms: u64,
}

impl FleetArgs {
    /// Refuses sizes the run cannot work with; `faults` says whether workers will be
    /// killed or paused.
    pub(crate) fn validate(&self, faults: bool) -> anyhow::Result<()> {
        let min = if faults { 2 } else { 1 };
        if !(min..=64).contains(&self.workers) {
            bail!(
                "--workers is {}; use {min} to 64 (a kill or a pause must leave one running, \
                 so faults need at least 2)",
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

/// Arguments of `idem chaos`.
#[derive(Args)]
pub struct ChaosArgs {
    /// Jobs the producer enqueues (chains' later links and batches' successors come on top)
    #[arg(long, default_value_t = 3000)]
    jobs: usize,
    /// How long the producer spreads them over, in minutes [default: jobs / 100 seconds, at least 30 s]
    #[arg(long)]
    minutes: Option<f64>,
    #[command(flatten)]
    fleet: FleetArgs,
    /// Worker processes to SIGKILL [default: jobs / 300, at least 10]
    #[arg(long)]
    kills: Option<usize>,
    /// Workers to SIGSTOP past their lease and then SIGCONT [default: jobs / 1000, at least 3]
    #[arg(long)]
    zombies: Option<usize>,
    /// Start a PostgreSQL server of the run's own (initdb in a temporary directory), so
    /// that the run can restart it and kill its connections
    #[arg(long, conflicts_with = "database_url")]
    own_postgres: bool,
    /// Immediate restarts of that server [default: 1 per 25000 jobs, at least 1]
    #[arg(long, requires = "own_postgres")]
    restarts: Option<usize>,
    /// Rounds of pg_terminate_backend on that server's connections [default: 3 + jobs / 3000]
    #[arg(long, requires = "own_postgres")]
    terminations: Option<usize>,
    /// Give that server a streaming standby (pg_basebackup, synchronous unless
    /// --async-standby), and mid-run stop the primary hard and promote the standby on the
    /// primary's address; every worker must complete a job again within 60 s
    #[arg(long, requires = "own_postgres")]
    failover: bool,
    /// Make the standby asynchronous: the failover then loses commits the standby had not
    /// received, which the checker counts (a run that shows what an async standby loses)
    #[arg(long, requires = "failover")]
    async_standby: bool,
    #[command(flatten)]
    scratch: ScratchArgs,
}

/// Everything a run needs to know: `idem chaos` builds it from its flags, `idem demo`
/// from its own.
pub(crate) struct Plan {
    pub(crate) jobs: usize,
    pub(crate) duration: Duration,
    pub(crate) fleet: FleetArgs,
    pub(crate) kills: usize,
    pub(crate) zombies: usize,
    pub(crate) terminations: usize,
    pub(crate) restarts: usize,
    pub(crate) own_postgres: bool,
    /// A failover to a standby of the run's own server: `Some(true)` synchronous,
    /// `Some(false)` asynchronous.
    pub(crate) failover: Option<bool>,
    pub(crate) scratch: ScratchArgs,
}

impl ChaosArgs {
    fn plan(self) -> anyhow::Result<Plan> {
        if !(100..=10_000_000).contains(&self.jobs) {
            bail!("--jobs is {}; use 100 to 10000000", self.jobs);
        }
        self.fleet.validate(true)?;
        let seconds = match self.minutes {
            Some(m) if !(0.1..=1440.0).contains(&m) => {
                bail!("--minutes is {m}; use 0.1 to 1440")
            }
            Some(m) => m * 60.0,
            None => (self.jobs as f64 / 100.0).max(30.0),
        };
        let own = self.own_postgres;
        Ok(Plan {
            jobs: self.jobs,
            duration: Duration::from_secs_f64(seconds),
            fleet: self.fleet,
            kills: self.kills.unwrap_or((self.jobs / 300).max(10)),
            zombies: self.zombies.unwrap_or((self.jobs / 1000).max(3)),
            terminations: match own {
                true => self.terminations.unwrap_or(3 + self.jobs / 3000),
                false => 0,
            },
            restarts: match own {
                true => self.restarts.unwrap_or((self.jobs / 25_000).max(1)),
                false => 0,
            },
            own_postgres: own,
            failover: self.failover.then_some(!self.async_standby),
            scratch: self.scratch,
        })
    }
}

/// What a finished run found.
pub(super) struct Outcome {
    pub(super) findings: check::Findings,
    pub(super) faults: faults::Done,
    pub(super) reports: Vec<(String, idem::WorkerReport)>,
    pub(super) settled: ReconcileReport,
    pub(super) elapsed: Duration,
    pub(super) database: String,
}

impl Outcome {
    /// The counters that prove the planned faults hit, each with the least it must be
    /// under `plan` (every planned kill, zombie and restart; one of the others).
    pub(super) fn proof(&self, plan: &Plan) -> Vec<(&'static str, i64, i64)> {
        let f = &self.faults;
        let refused: u64 = self.reports.iter().map(|(_, r)| r.lease_lost).sum();
        let s = &self.settled;
        let reconciled = s.applied + s.absent + s.duplicates + s.manual + s.audit_duplicates;
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let some = |planned: usize| i64::from(planned > 0);
        vec![
            (
                "workers killed (SIGKILL)",
                n(f.kills as u64),
                plan.kills as i64,
            ),
            ("  inside an effect transaction", n(f.kills_in_tx as u64), 0),
            (
                "  with a batched completion pending",
                n(f.kills_in_completion as u64),
                0,
            ),
            ("  at a random moment", n(f.kills_at_random as u64), 0),
            (
                "  with a remote call in flight",
                n(f.kills_mid_call as u64),
                0,
            ),
            (
                "zombie workers (SIGSTOP past the lease)",
                n(f.zombies as u64),
                plan.zombies as i64,
            ),
            (
                "PostgreSQL restarts (immediate)",
                n(f.restarts as u64),
                plan.restarts as i64,
            ),
            (
                "backend connections killed",
                n(f.terminated as u64),
                some(plan.terminations),
            ),
            (
                "failovers (primary stopped hard, standby promoted)",
                n(f.failovers as u64),
                i64::from(plan.failover.is_some()),
            ),
            (
                "jobs taken over after a lost lease",
                self.findings.rescues,
                some(plan.kills + plan.zombies),
            ),
            (
                "  remote-call intents taken over",
                self.findings.intent_takeovers,
                0,
            ),
            (
                "stale commits refused by the fence",
                n(refused),
                some(plan.zombies),
            ),
            // The sink answers some unkeyed calls with an error after applying them; a run
            // of 100 jobs or more has such calls.
            (
                "unknown outcomes reconciled",
                n(reconciled),
                i64::from(plan.jobs >= 100),
            ),
        ]
    }

    /// Every safety count 0, every proof at its least, and every worker back within
    /// [`failover::BOUND`] of a failover.
    pub(super) fn passed(&self, plan: &Plan) -> bool {
        self.findings.safe()
            && self.faults.late.is_empty()
            && self.proof(plan).iter().all(|(_, v, least)| v >= least)
    }
}

/// `idem chaos`.
pub async fn run(args: ChaosArgs) -> anyhow::Result<ExitCode> {
    let plan = args.plan().or_exit(Exit::Usage)?;
    println!(
        "idem chaos: {} jobs over {:.0} s, {} worker processes × {} slots, lease {} ms; \
         {} kills, {} zombies, {} restarts, {} rounds of killed connections{}",
        plan.jobs,
        plan.duration.as_secs_f64(),
        plan.fleet.workers,
        plan.fleet.concurrency,
        plan.fleet.lease_ms,
        plan.kills,
        plan.zombies,
        plan.restarts,
        plan.terminations,
        match plan.failover {
            Some(true) => ", a failover to a synchronous standby",
            Some(false) => ", a failover to an asynchronous standby",
            None => "",
        }
    );
    run_plan(&plan).await
}

/// Runs `plan` and prints its report; the exit code says whether it passed.
pub(crate) async fn run_plan(plan: &Plan) -> anyhow::Result<ExitCode> {
    match execute(plan).await? {
        Ok(outcome) => {
            report::print(plan, &outcome);
            Ok(match outcome.passed(plan) {
                true => ExitCode::SUCCESS,
                false => Exit::Refused.code(),
            })
        }
        Err(code) => Ok(code),
    }
}

/// Runs `plan` with everything it starts cleaned up however the run ends: finished,
/// failed, or cut short by SIGINT or SIGTERM (answered as the exit code to give).
async fn execute(plan: &Plan) -> anyhow::Result<Result<Outcome, ExitCode>> {
    let mut interrupt = Interrupt::listen()?;
    let dir = tempfile::Builder::new().prefix("idem-chaos-").tempdir()?;
    let mut fleet = Fleet::new(plan, dir.path())?;
    let mut pg = match plan.own_postgres {
        true => Some(
            Cluster::start(plan.failover.is_some(), plan.failover == Some(false))
                .await
                .context("cannot start a PostgreSQL of the run's own")?,
        ),
        false => None,
    };
    if let Some(c) = pg.as_ref().filter(|c| c.has_standby()) {
        println!("PostgreSQL of the run's own: {}", c.describe());
    }
    let url = pg
        .as_ref()
        .map(|p| p.primary().url().to_owned())
        .or(plan.scratch.database_url.clone());
    let db = scratch::open(url, "chaos", "")
        .await
        .context("cannot set up the run's database")?;
    println!("database: {}", db.label);
    let outcome = interrupt
        .run(go(plan, &db, &mut fleet, pg.as_mut(), dir.path()))
        .await;
    let killed = fleet.kill_all().await;
    db.finish(plan.scratch.keep).await;
    // The logs stay for a run that failed or found something (not one cut short).
    let failed = match &outcome {
        Ok(Ok(o)) => !o.passed(plan),
        Ok(Err(_)) => true,
        Err(_) => false,
    };
    if plan.scratch.keep || failed {
        println!("logs kept in {}", dir.keep().display());
    }
    if let Some(pg) = pg
        && let Err(e) = pg.stop().await
    {
        eprintln!("could not stop the run's PostgreSQL server: {e:#}");
    }
    match outcome {
        Ok(done) => done.map(Ok),
        Err(signal) => {
            let workers = match killed.is_empty() {
                true => "no worker process had started".to_owned(),
                false => format!("killed {}", killed.join(", ")),
            };
            eprintln!("idem: stopped by {signal}; {workers}");
            Ok(Err(signal.exit_code()))
        }
    }
}

/// The run proper.
async fn go(
    plan: &Plan,
    db: &scratch::Scratch,
    fleet: &mut Fleet,
    pg: Option<&mut Cluster>,
    dir: &std::path::Path,
) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    let mut tx = db.idem.begin().await?;
    for sql in workload::TABLES {
        tx.execute(sql, &[]).await?;
    }
    tx.commit().await?;
    let requests = Requests::plan(plan.jobs);
    let expected = requests.expected_jobs();
    let calls = plan.jobs / 10;
    let sink_faults = SinkFaults {
        unknown: (calls / 40).max(3),
        hang: (calls / 200).max(1),
        delays: calls / 4,
        delay_ms: plan.fleet.lease_ms / 5,
        late: 2,
        late_ms: plan.fleet.lease_ms * 4,
    };
    let sink = Sink::spawn(dir, sink_faults).await?;
    fleet.start(&db.url, plan.fleet.workers)?;
    let produced = Arc::new(Produced::default());
    let log_path = dir.join("asked.jsonl");
    let producing = tokio::spawn(producer::produce(
        db.idem.clone(),
        requests,
        Urls {
            keyed: sink.keyed_url.clone(),
            unkeyed: sink.unkeyed_url.clone(),
        },
        asked::AskedLog::create(&log_path)?,
        plan.duration.mul_f64(0.8),
        Arc::clone(&produced),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let reconciling = tokio::spawn(settle::during(
        db.idem.clone(),
        plan.fleet.lease_ms,
        Arc::clone(&stop),
    ));
    let sqlite = scratch::sqlite_path(&db.url);
    let faults = faults::drive(&db.idem, plan, fleet, pg, sqlite, &produced, expected).await;
    stop.store(true, Ordering::SeqCst);
    if !producing.is_finished() {
        producing.abort();
    }
    producing.await.ok().transpose()?;
    let mut settled = reconciling.await??;
    let faults = faults?;
    let late = Duration::from_millis(sink_faults.late_ms);
    settled.absorb(&settle::settle(&db.idem, plan.fleet.lease_ms, late).await?);
    let reports = fleet.stop().await;
    let (keyed, unkeyed) = sink.journals()?;
    sink.stop().await?;
    let applied = check::Applied {
        keyed: copies(&keyed),
        unkeyed: copies(&unkeyed),
    };
    let asked = asked::read(&log_path)?;
    let findings = check::check(&db.url, &asked, &applied).await?;
    Ok(Outcome {
        findings,
        faults,
        reports,
        settled,
        elapsed: started.elapsed(),
        database: db.label.clone(),
    })
}

/// Copies the sink applied per request, by the `req` its body carries.
fn copies(journal: &[idem_mock_remote::JournalEntry]) -> std::collections::HashMap<u64, usize> {
    let mut copies = std::collections::HashMap::new();
    for entry in journal {
        if let Some(req) = entry.body.get("req").and_then(serde_json::Value::as_u64) {
            *copies.entry(req).or_default() += 1;
        }
    }
    copies
}
