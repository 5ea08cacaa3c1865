//! `idem enqueue`: one job from the command line, into an existing database whose
//! schema is current. The input is checked before the database is opened, so a wrong
//! value is a usage error (exit 2) whatever the database.

use std::process::ExitCode;

use clap::Args;
use idem::Job;

use crate::database;
use crate::exit::{Exit, OrExit};
use crate::output::print_json;

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

/// `idem enqueue`: prints the job (and whether it was deduplicated) as JSON.
pub async fn run(url: &str, a: EnqueueArgs) -> anyhow::Result<ExitCode> {
    let job = job(a)?;
    let idem = database::open(url).await?;
    print_json(&idem.enqueue(job).await?)?;
    Ok(ExitCode::SUCCESS)
}

/// The job the arguments describe, checked.
fn job(a: EnqueueArgs) -> anyhow::Result<Job> {
    let args: serde_json::Value = serde_json::from_str(&a.args)
        .map_err(|e| anyhow::anyhow!("--args is not valid JSON: {:?}: {e}", a.args))
        .or_exit(Exit::Usage)?;
    let mut job = Job::new(a.kind, args).queue(a.queue).priority(a.priority);
    if let Some(at) = a.run_at {
        let at = chrono::DateTime::parse_from_rfc3339(&at)
            .map_err(|e| anyhow::anyhow!("--run-at {at:?} is not an RFC 3339 time: {e}"))
            .or_exit(Exit::Usage)?;
        job = job.run_at(at.with_timezone(&chrono::Utc));
    }
    if let Some(n) = a.max_attempts {
        job = job.max_attempts(n);
    }
    if let Some(key) = a.enqueue_key {
        job = job.enqueue_key(key);
    }
    job.validate()?;
    Ok(job)
}
