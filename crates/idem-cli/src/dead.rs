//! `idem dead …` (list, inspect, retry and discard dead jobs) and `idem purge` (delete
//! records past their retention, in batches, with a progress bar).
//!
//! A retry or discard of listed ids acts on those it can and names the others: an id
//! that does not exist makes the command exit 3 (not found), a job that exists but is
//! not dead (retry: nor cancelled) is left alone and makes it exit 1 (refused).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use idem::{DeadFilter, Idem, JobState, PurgeTarget};
use indicatif::{ProgressBar, ProgressStyle};

use crate::database::open;
use crate::exit::{Exit, OrExit, fail};
use crate::jobs::{FilterArgs, ListArgs, ShowArgs, list_jobs, show_job};
use crate::output::Format;

/// `idem dead …`.
#[derive(Subcommand)]
pub enum DeadCommand {
    /// List dead jobs, newest first
    List {
        #[command(flatten)]
        list: ListArgs,
    },
    /// Show one dead job with its last error and every attempt
    Show {
        /// Job id
        id: i64,
        #[command(flatten)]
        format: Format,
    },
    /// Put dead jobs back to available with a fresh ladder (their history is kept).
    /// Refused, retrying none, when a job's first attempt is too old for its effect keys
    /// to outlive a new retry horizon (see `idem config check`)
    Retry {
        #[command(flatten)]
        selection: Selection,
        /// Retry even jobs whose first attempt is older than the effect-key retention
        /// minus the retry horizon and margin. Risk: their effect keys may be purged
        /// before the retry ends, so effects their earlier attempts made can happen
        /// again
        #[arg(long)]
        force: bool,
        /// Config file whose retention windows and retry settings judge the retry
        /// (default: ./idem.toml if present; else the built-in defaults)
        #[arg(long, env = "IDEM_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Delete dead jobs with their history and enqueue keys
    Discard {
        #[command(flatten)]
        selection: Selection,
        /// Confirm a discard of --all (it cannot be undone)
        #[arg(long)]
        yes: bool,
    },
}

/// Which dead jobs a bulk action takes: listed ids, or `--all` matching the filters.
#[derive(Args)]
pub struct Selection {
    /// Job ids
    ids: Vec<i64>,
    /// Every dead job matching --queue and --kind (instead of ids)
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    filter: FilterArgs,
}

impl Selection {
    async fn ids(&self, idem: &Idem) -> anyhow::Result<Vec<i64>> {
        match (self.all, self.ids.is_empty()) {
            (true, true) => Ok(idem
                .dead_ids(&DeadFilter {
                    queue: self.filter.queue.clone(),
                    kind: self.filter.kind.clone(),
                })
                .await?),
            (false, false) if self.filter.queue.is_none() && self.filter.kind.is_none() => {
                Ok(self.ids.clone())
            }
            (false, false) => Err(usage(
                "--queue and --kind filter --all; give ids or --all, not both",
            )),
            (true, false) => Err(usage("give job ids or --all, not both")),
            (false, true) => Err(usage(
                "give the ids of the dead jobs, or --all (with --queue/--kind to narrow it)",
            )),
        }
    }
}

fn usage(message: &str) -> anyhow::Error {
    fail(Exit::Usage, message)
}

/// `idem dead …`.
pub async fn dead(url: &str, cmd: DeadCommand) -> anyhow::Result<ExitCode> {
    let idem = open(url).await?;
    match cmd {
        DeadCommand::List { list } => {
            list_jobs(&idem, &list, Some(JobState::Dead)).await?;
        }
        DeadCommand::Show { id, format } => {
            let job = show_job(&idem, &ShowArgs { id, format }).await?;
            if job.state != JobState::Dead {
                eprintln!("note: job {} is {}, not dead", job.id, job.state);
            }
        }
        DeadCommand::Retry {
            selection: sel,
            force,
            config,
        } => {
            let config = crate::config::CliConfig::load(config.as_deref()).or_exit(Exit::Config)?;
            let idem = idem
                .with_retention(config.retention)?
                .with_horizon(config.horizon());
            let ids = sel.ids(&idem).await?;
            let retried = match force {
                true => idem.retry_jobs_forced(ids.clone()).await?,
                false => idem.retry_jobs(ids.clone()).await?,
            };
            let done: Vec<i64> = retried.iter().map(|j| j.id).collect();
            println!("retried {} of {} job(s)", done.len(), ids.len());
            return left_alone(&idem, &ids, &done, "dead or cancelled").await;
        }
        DeadCommand::Discard {
            selection: sel,
            yes,
        } => {
            let ids = sel.ids(&idem).await?;
            let asked = ids.len();
            if sel.all && !yes {
                return Err(usage(&format!(
                    "{asked} dead job(s) match; discarding deletes them with their history and \
                     cannot be undone: add --yes to go ahead"
                )));
            }
            let done = idem.discard_jobs(ids.clone()).await?;
            println!("discarded {} of {asked} job(s)", done.len());
            return left_alone(&idem, &ids, &done, "dead").await;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Names the jobs of `asked` an action left alone (not in `done`): those that do not
/// exist (exit 3) and those not `wanted` (exit 1, each named on stderr with its state).
async fn left_alone(
    idem: &Idem,
    asked: &[i64],
    done: &[i64],
    wanted: &str,
) -> anyhow::Result<ExitCode> {
    let (mut missing, mut refused) = (Vec::new(), 0);
    for &id in asked.iter().filter(|id| !done.contains(id)) {
        match idem.job(id).await? {
            None => missing.push(id.to_string()),
            Some(job) => {
                refused += 1;
                eprintln!("job {id} is {}, not {wanted}: left alone", job.state);
            }
        }
    }
    if !missing.is_empty() {
        let ids = missing.join(", ");
        return Err(fail(Exit::NotFound, format!("no job with id {ids}")));
    }
    if refused > 0 {
        return Err(fail(
            Exit::Refused,
            format!("{refused} job(s) not {wanted} were left alone"),
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `idem purge`.
#[derive(Args)]
pub struct PurgeArgs {
    /// Config file with the retention windows (default: ./idem.toml if present)
    #[arg(long, env = "IDEM_CONFIG")]
    config: Option<PathBuf>,
    /// Records deleted per statement (each batch is its own short transaction)
    #[arg(long, default_value_t = idem::DEFAULT_PURGE_BATCH,
          value_parser = clap::value_parser!(u32).range(1..))]
    batch: u32,
    /// Only count what is past its retention; delete nothing
    #[arg(long)]
    dry_run: bool,
}

/// `idem purge`.
pub async fn purge(url: &str, a: PurgeArgs) -> anyhow::Result<ExitCode> {
    let config = crate::config::CliConfig::load(a.config.as_deref()).or_exit(Exit::Config)?;
    // The same check a worker makes at start-up: a window shorter than the retry horizon
    // would purge dedup records that a retry may still need.
    config
        .check()
        .context("refusing to purge with these retention windows (see `idem config check`)")?;
    let idem = open(url).await?.with_retention(config.retention)?;
    for target in PurgeTarget::ALL {
        let cutoff = idem.purge_cutoff(target).await?;
        let pending = idem.purge_count(target, cutoff).await?;
        let label = format!(
            "{target:<14} before {}",
            cutoff.format("%Y-%m-%d %H:%M:%S UTC")
        );
        if a.dry_run || pending == 0 {
            println!("{label}: {pending} past retention");
            continue;
        }
        let bar = ProgressBar::new(pending);
        bar.set_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({per_sec})")
                .expect("a valid progress template")
                .progress_chars("=> "),
        );
        bar.set_message(label.clone());
        let deleted = idem
            .purge_before(target, cutoff, a.batch, |n| bar.inc(n))
            .await?;
        bar.finish_and_clear();
        println!("{label}: deleted {deleted}");
    }
    Ok(ExitCode::SUCCESS)
}
