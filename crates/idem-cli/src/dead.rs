//! `idem dead …`: list, inspect, retry and discard dead jobs. Which jobs a retry or a
//! discard takes, and its preview, is `bulk.rs`.
//!
//! A retry or discard acts on the ids it was given or previewed, those it can, and names
//! the others: an id that does not exist makes the command exit 3 (not found), a job that
//! exists but is not dead (retry: nor cancelled) is left alone and makes it exit 1
//! (refused). `--json` prints the outcome (`docs/cli-json.md`) before that exit.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use idem::{BULK_PAGE, Idem, JobState};
use serde::Serialize;

use crate::bulk::Selection;
use crate::database::open;
use crate::exit::{Exit, OrExit, fail};
use crate::jobs::{ListArgs, ShowArgs, list_jobs, show_job};
use crate::output::{Format, print_json};
use crate::verbosity::{note, say};

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
    /// Delete dead jobs with their history and enqueue keys (cannot be undone)
    Discard {
        #[command(flatten)]
        selection: Selection,
    },
}

/// What a retry or discard did: its `--json` document.
#[derive(Serialize)]
struct Outcome {
    action: &'static str,
    asked: Vec<i64>,
    done: Vec<i64>,
    left_alone: Vec<LeftAlone>,
    missing: Vec<i64>,
}

/// A job an action left alone, and the state that made it.
#[derive(Serialize)]
struct LeftAlone {
    id: i64,
    state: JobState,
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
                note(format!("job {} is {}, not dead", job.id, job.state));
            }
        }
        DeadCommand::Retry {
            selection,
            force,
            config,
        } => return retry(idem, &selection, force, config).await,
        DeadCommand::Discard { selection } => return discard(&idem, &selection).await,
    }
    Ok(ExitCode::SUCCESS)
}

/// `idem dead retry`: the previewed ids in one transaction, judged by the config file's
/// windows unless `force`.
async fn retry(
    idem: Idem,
    sel: &Selection,
    force: bool,
    config: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let config = crate::config::CliConfig::load(config.as_deref()).or_exit(Exit::Config)?;
    let idem = idem
        .with_retention(config.retention)?
        .with_horizon(config.horizon());
    let Some(ids) = sel.pick(&idem, "retry").await? else {
        return Ok(ExitCode::SUCCESS);
    };
    tracing::info!(jobs = ids.len(), force, "retrying dead jobs");
    // One transaction, refused as a whole: a spinner, since no count is settled before
    // it commits.
    let spinner = crate::progress::spinner(format!("retrying {} job(s)", ids.len()));
    let retried = match force {
        true => idem.retry_jobs_forced(ids.clone()).await,
        false => idem.retry_jobs(ids.clone()).await,
    };
    spinner.finish_and_clear();
    let done = retried?.iter().map(|j| j.id).collect();
    let code = report(&idem, sel, "retry", ids, done).await;
    // Wakes the workers of other processes before this one exits.
    idem.close().await;
    code
}

/// `idem dead discard`: the previewed ids, [`BULK_PAGE`] at a time, with a bar.
async fn discard(idem: &Idem, sel: &Selection) -> anyhow::Result<ExitCode> {
    let Some(ids) = sel.pick(idem, "discard").await? else {
        return Ok(ExitCode::SUCCESS);
    };
    tracing::info!(jobs = ids.len(), "discarding dead jobs");
    let bar = crate::progress::bar(ids.len() as u64, "discarding");
    let mut done = Vec::new();
    for page in ids.chunks(BULK_PAGE as usize) {
        done.extend(idem.discard_jobs(page.to_vec()).await?);
        bar.inc(page.len() as u64);
    }
    bar.finish_and_clear();
    report(idem, sel, "discard", ids, done).await
}

/// Prints what `action` did (text or JSON), then exits 3 when an id does not exist and
/// 1 when a job was left alone, each named on stderr.
async fn report(
    idem: &Idem,
    sel: &Selection,
    action: &'static str,
    asked: Vec<i64>,
    done: Vec<i64>,
) -> anyhow::Result<ExitCode> {
    let outcome = outcome(idem, action, asked, done).await?;
    match sel.format.json {
        true => print_json(&outcome)?,
        false => say(format!(
            "{} {} of {} job(s)",
            past(action),
            outcome.done.len(),
            outcome.asked.len()
        )),
    }
    let wanted = match action {
        "retry" => "dead or cancelled",
        _ => "dead",
    };
    for LeftAlone { id, state } in &outcome.left_alone {
        eprintln!("job {id} is {state}, not {wanted}: left alone");
    }
    if !outcome.missing.is_empty() {
        let ids: Vec<String> = outcome.missing.iter().map(i64::to_string).collect();
        let ids = ids.join(", ");
        return Err(fail(Exit::NotFound, format!("no job with id {ids}")));
    }
    match outcome.left_alone.len() {
        0 => Ok(ExitCode::SUCCESS),
        n => Err(fail(
            Exit::Refused,
            format!("{n} job(s) not {wanted} were left alone"),
        )),
    }
}

fn past(action: &str) -> &'static str {
    match action {
        "retry" => "retried",
        _ => "discarded",
    }
}

/// The jobs of `asked` an action left alone (not in `done`): those that do not exist,
/// and those in another state.
async fn outcome(
    idem: &Idem,
    action: &'static str,
    asked: Vec<i64>,
    done: Vec<i64>,
) -> anyhow::Result<Outcome> {
    let finished: HashSet<i64> = done.iter().copied().collect();
    let (mut missing, mut left_alone) = (Vec::new(), Vec::new());
    for &id in asked.iter().filter(|id| !finished.contains(id)) {
        match idem.job(id).await? {
            None => missing.push(id),
            Some(job) => left_alone.push(LeftAlone {
                id,
                state: job.state,
            }),
        }
    }
    Ok(Outcome {
        action,
        asked,
        done,
        left_alone,
        missing,
    })
}
