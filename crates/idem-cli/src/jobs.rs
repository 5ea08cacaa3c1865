//! `idem jobs list|show|cancel`, and the pieces `idem dead` shares with them: the filters
//! and page of a list, the job table, a job shown in full.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use idem::{Idem, JobList, JobRow, JobState, StoreError};

use crate::database;
use crate::output::{Format, print_json};
use crate::table::{Table, left, right};

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
    Show(ShowArgs),
    /// Cancel an unfinished job
    Cancel {
        /// Job id
        id: i64,
        #[command(flatten)]
        format: Format,
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

/// A page of a job list: filters, where the page starts, how long it is, how it prints.
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
    #[command(flatten)]
    format: Format,
}

impl ListArgs {
    /// The list of jobs in `state` (any state when `None`) these arguments ask for.
    fn of_state(&self, state: Option<JobState>) -> JobList {
        JobList {
            state,
            queue: self.filter.queue.clone(),
            kind: self.filter.kind.clone(),
            principal: None,
            before_id: self.before,
            limit: self.limit,
        }
    }
}

/// The job a show prints, and how.
#[derive(Args)]
pub struct ShowArgs {
    /// Job id
    pub id: i64,
    #[command(flatten)]
    pub format: Format,
}

/// `idem jobs …`.
pub async fn run(url: &str, cmd: JobsCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        JobsCommand::List { state, list } => {
            let state = state.map(|s| s.parse::<JobState>()).transpose()?;
            list_jobs(&database::open(url).await?, &list, state).await?;
        }
        JobsCommand::Show(show) => {
            show_job(&database::open(url).await?, &show).await?;
        }
        JobsCommand::Cancel { id, format } => {
            let job = database::open(url).await?.cancel(id).await?;
            match format.json {
                true => print_json(&job)?,
                false => crate::verbosity::say(format!("job {} is {}", job.id, job.state)),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the jobs in `state` (any when `None`) that `list` asks for: a table, or JSON.
pub async fn list_jobs(
    idem: &Idem,
    list: &ListArgs,
    state: Option<JobState>,
) -> anyhow::Result<()> {
    let rows = idem.jobs(list.of_state(state)).await?;
    if list.format.json {
        return print_json(&rows);
    }
    job_table(&rows).print();
    Ok(())
}

/// Prints one job with its attempt history, in full or as JSON; returns the job. An
/// unknown id is not found (exit 3).
pub async fn show_job(idem: &Idem, show: &ShowArgs) -> anyhow::Result<JobRow> {
    let id = show.id;
    let Some(job) = idem.job(id).await? else {
        return Err(StoreError::not_found(format!("job {id}")).into());
    };
    let attempts = idem.attempts(id).await?;
    match show.format.json {
        true => print_json(&serde_json::json!({ "job": job, "attempts": attempts }))?,
        false => crate::show::print_job(&job, &attempts),
    }
    Ok(job)
}

/// One line per job; the last error cut to one line (`show` has it in full).
pub fn job_table(rows: &[JobRow]) -> Table {
    let mut table = Table::new(&[
        right("id"),
        left("state", 10),
        left("queue", 32),
        left("kind", 32),
        right("attempt"),
        left("last error", 100),
    ]);
    for j in rows {
        table.row(vec![
            j.id.to_string(),
            j.state.as_str().to_owned(),
            j.queue.clone(),
            j.kind.clone(),
            format!("{}/{}", j.attempt, j.max_attempts),
            j.last_error.clone().unwrap_or_default(),
        ]);
    }
    table
}
