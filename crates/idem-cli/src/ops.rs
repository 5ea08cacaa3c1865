//! Operator commands: migrate, enqueue, jobs list/show/cancel, queues.

use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use idem::{Idem, Job, JobList, JobRow, JobState};

pub(crate) async fn connect(url: &str) -> anyhow::Result<Idem> {
    Idem::connect(url)
        .await
        .with_context(|| "cannot open the idem database".to_string())
}

/// `idem migrate`.
pub async fn migrate(url: &str) -> anyhow::Result<ExitCode> {
    let store = idem::connect_store(url).await?;
    let applied = store.migrate().await?;
    println!("applied {applied} migration(s); the schema is current");
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `idem enqueue`.
#[derive(Args)]
pub struct EnqueueArgs {
    /// Job kind (the handler's name)
    #[arg(long)]
    kind: String,
    /// Arguments as JSON
    #[arg(long, default_value = "{}")]
    args: String,
    /// Queue
    #[arg(long, default_value = "default")]
    queue: String,
    /// Priority; lower runs first
    #[arg(long, default_value_t = 0)]
    priority: i16,
    /// Earliest start, RFC 3339 (e.g. 2026-12-01T10:00:00Z)
    #[arg(long)]
    run_at: Option<String>,
    /// Attempts before the job is dead
    #[arg(long)]
    max_attempts: Option<i32>,
    /// Makes the enqueue idempotent: the same key in the same queue inside the retention
    /// window returns the first job ("deduplicated": true)
    #[arg(long)]
    enqueue_key: Option<String>,
}

/// `idem enqueue`.
pub async fn enqueue(url: &str, a: EnqueueArgs) -> anyhow::Result<ExitCode> {
    let args: serde_json::Value = serde_json::from_str(&a.args)
        .with_context(|| format!("--args is not valid JSON: {:?}", a.args))?;
    let mut job = Job::new(a.kind, args).queue(a.queue).priority(a.priority);
    if let Some(at) = a.run_at {
        let at = chrono::DateTime::parse_from_rfc3339(&at)
            .with_context(|| format!("--run-at {at:?} is not an RFC 3339 time"))?;
        job = job.run_at(at.with_timezone(&chrono::Utc));
    }
    if let Some(n) = a.max_attempts {
        job = job.max_attempts(n);
    }
    if let Some(key) = a.enqueue_key {
        job = job.enqueue_key(key);
    }
    let idem = connect(url).await?;
    let row = idem.enqueue(job).await?;
    println!("{}", serde_json::to_string_pretty(&row)?);
    Ok(ExitCode::SUCCESS)
}

/// `idem jobs …`.
#[derive(Subcommand)]
pub enum JobsCommand {
    /// List jobs, newest first
    List {
        /// Only this state (scheduled, available, running, retryable, completed, dead, cancelled)
        #[arg(long)]
        state: Option<String>,
        #[command(flatten)]
        list: ListArgs,
    },
    /// Show one job with its attempts
    Show {
        /// Job id
        id: i64,
    },
    /// Cancel an unfinished job
    Cancel {
        /// Job id
        id: i64,
    },
}

/// Filters of a job list or a bulk action: queue and kind.
#[derive(Args, Clone)]
pub struct FilterArgs {
    /// Only this queue
    #[arg(long)]
    pub queue: Option<String>,
    /// Only this kind
    #[arg(long)]
    pub kind: Option<String>,
}

/// A page of a job list: filters, where the page starts, how long it is.
#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    filter: FilterArgs,
    /// Only ids below this one (pagination)
    #[arg(long)]
    before: Option<i64>,
    /// At most this many
    #[arg(long, default_value_t = 50)]
    limit: u32,
}

impl ListArgs {
    /// The list of jobs in `state` (any state when `None`) these arguments ask for.
    pub fn of_state(self, state: Option<JobState>) -> JobList {
        JobList {
            state,
            queue: self.filter.queue,
            kind: self.filter.kind,
            before_id: self.before,
            limit: self.limit,
        }
    }
}

/// `idem jobs …`.
pub async fn jobs(url: &str, cmd: JobsCommand) -> anyhow::Result<ExitCode> {
    let idem = connect(url).await?;
    match cmd {
        JobsCommand::List { state, list } => {
            let state = state.map(|s| s.parse::<JobState>()).transpose()?;
            print_jobs(&idem.jobs(list.of_state(state)).await?);
        }
        JobsCommand::Show { id } => {
            show_job(&idem, id).await?;
        }
        JobsCommand::Cancel { id } => {
            let job = idem.cancel(id).await?;
            println!("job {} is {}", job.id, job.state);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints one job with its attempt history as JSON; returns the job.
pub(crate) async fn show_job(idem: &Idem, id: i64) -> anyhow::Result<JobRow> {
    let Some(job) = idem.job(id).await? else {
        bail!("job {id} not found");
    };
    let attempts = idem.attempts(id).await?;
    let out = serde_json::json!({ "job": job, "attempts": attempts });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(job)
}

pub(crate) fn print_jobs(rows: &[JobRow]) {
    println!(
        "{:>10}  {:<10}  {:<16}  {:<24}  {:>7}  last error",
        "id", "state", "queue", "kind", "attempt"
    );
    for j in rows {
        println!(
            "{:>10}  {:<10}  {:<16}  {:<24}  {:>3}/{:<3}  {}",
            j.id,
            j.state.as_str(),
            j.queue,
            j.kind,
            j.attempt,
            j.max_attempts,
            j.last_error.as_deref().unwrap_or("")
        );
    }
}

/// `idem queues`.
pub async fn queues(url: &str) -> anyhow::Result<ExitCode> {
    let idem = connect(url).await?;
    println!("{:<24}  {:<10}  {:>10}", "queue", "state", "jobs");
    for c in idem.queue_counts().await? {
        println!("{:<24}  {:<10}  {:>10}", c.queue, c.state.as_str(), c.count);
    }
    Ok(ExitCode::SUCCESS)
}

/// `idem guarantees`: what idem promises for each effect class, and for each job kind
/// this binary registers.
pub fn guarantees(kinds: &[(String, idem::EffectClass)]) -> ExitCode {
    println!("Delivery is at-least-once: a handler may run more than once. What each effect");
    println!("class guarantees about the handler's effect:");
    println!();
    for class in idem::EffectClass::ALL {
        println!("  {:<14} {}", class.as_str(), class.guarantee());
        println!("  {:<14} mechanism: {}", "", class.mechanism());
        if !class.built() {
            println!(
                "  {:<14} planned: not built yet; jobs of this class run at-least-once today",
                ""
            );
        }
    }
    println!();
    println!("{:<24} {:<14} guarantee today", "job kind", "effect class");
    for (kind, class) in kinds {
        println!(
            "{kind:<24} {:<14} {}",
            class.as_str(),
            class.guarantee_now()
        );
    }
    ExitCode::SUCCESS
}

/// `idem ledger …`.
#[derive(Subcommand)]
pub enum LedgerCommand {
    /// List every account whose running total differs from the sum of its entries
    Verify,
    /// Rebuild mismatched totals from their entries (a dry run unless --apply)
    Repair {
        /// Write the rebuilt totals
        #[arg(long)]
        apply: bool,
    },
}

/// `idem ledger …`: exits 1 when `verify` finds mismatches.
pub async fn ledger(url: &str, cmd: LedgerCommand) -> anyhow::Result<ExitCode> {
    let idem = connect(url).await?;
    let verifying = matches!(cmd, LedgerCommand::Verify);
    let (found, verb) = match cmd {
        LedgerCommand::Verify => (idem.ledger_verify().await?, "differ"),
        LedgerCommand::Repair { apply: false } => (
            idem.ledger_repair(false).await?,
            "would be rebuilt (dry run; --apply writes)",
        ),
        LedgerCommand::Repair { apply: true } => (idem.ledger_repair(true).await?, "rebuilt"),
    };
    if found.is_empty() {
        println!("every running total equals the sum of its entries");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<32} {:>16} {:>16} {:>8}",
        "account", "running total", "sum of entries", "entries"
    );
    for m in &found {
        let total = m
            .balance
            .map_or_else(|| "(none)".to_owned(), |b| b.to_string());
        println!(
            "{:<32} {total:>16} {:>16} {:>8}",
            m.account, m.sum, m.entries
        );
    }
    println!("{} account(s) {verb}", found.len());
    Ok(if verifying {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
