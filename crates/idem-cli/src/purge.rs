//! `idem purge`: delete records past their retention, target by target, in batches
//! (each its own short transaction), with a progress bar.
//!
//! What must stay true: the windows are checked as a worker checks them at start-up
//! before anything is deleted, and each target deletes what it counted (the cutoff is
//! read once and passed to the delete).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use idem::{Idem, PurgeTarget, Timestamp};
use serde::Serialize;

use crate::database::open;
use crate::exit::{Exit, OrExit};
use crate::output::{Format, print_json};
use crate::verbosity::say;

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
    #[command(flatten)]
    format: Format,
}

/// One target of a purge: its `--json` element.
#[derive(Serialize)]
struct Purged {
    target: PurgeTarget,
    cutoff: Timestamp,
    past_retention: u64,
    deleted: Option<u64>,
}

/// `idem purge`.
pub async fn run(url: &str, a: PurgeArgs) -> anyhow::Result<ExitCode> {
    let config = crate::config::CliConfig::load(a.config.as_deref()).or_exit(Exit::Config)?;
    // The same check a worker makes at start-up: a window shorter than the retry horizon
    // would purge dedup records that a retry may still need.
    config
        .check()
        .context("refusing to purge with these retention windows (see `idem config check`)")?;
    let idem = open(url).await?.with_retention(config.retention)?;
    let mut all = Vec::new();
    for target in PurgeTarget::ALL {
        let purged = purge(&idem, target, &a).await?;
        if !a.format.json {
            say(line(&purged));
        }
        all.push(purged);
    }
    if a.format.json {
        print_json(&all)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Counts what `target` holds past its retention and, unless a dry run, deletes it.
async fn purge(idem: &Idem, target: PurgeTarget, a: &PurgeArgs) -> anyhow::Result<Purged> {
    let cutoff = idem.purge_cutoff(target).await?;
    let pending = idem.purge_count(target, cutoff).await?;
    let mut purged = Purged {
        target,
        cutoff,
        past_retention: pending,
        deleted: None,
    };
    if a.dry_run || pending == 0 {
        purged.deleted = (!a.dry_run).then_some(0);
        return Ok(purged);
    }
    let bar = crate::progress::bar(pending, format!("{target}"));
    let deleted = idem
        .purge_before(target, cutoff, a.batch, |n| bar.inc(n))
        .await?;
    bar.finish_and_clear();
    tracing::info!(%target, deleted, "purged records past their retention");
    purged.deleted = Some(deleted);
    Ok(purged)
}

/// `effect_keys    before 2026-12-01 10:00:00 UTC: deleted 12` (or `: 12 past retention`).
fn line(p: &Purged) -> String {
    let label = format!(
        "{:<14} before {}",
        p.target.to_string(),
        p.cutoff.format("%Y-%m-%d %H:%M:%S UTC")
    );
    match p.deleted {
        Some(n) => format!("{label}: deleted {n}"),
        None => format!("{label}: {} past retention", p.past_retention),
    }
}
