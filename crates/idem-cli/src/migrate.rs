//! `idem migrate`: the one command that creates a database and changes its schema. It
//! says what it applies before applying it; `--status` (or `--dry-run`) only lists the
//! applied and pending migrations.
//!
//! What must stay true: `--status` writes nothing and creates nothing (`Idem::open`'s
//! rules); a database a newer idem migrated is refused by both forms (exit 6).

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use idem::SchemaStatus;

use crate::database;
use crate::exit::{Exit, fail};
use crate::output::{Format, print_json};
use crate::show::time;
use crate::table::{Table, left};
use crate::verbosity::say;

/// Arguments of `idem migrate`.
#[derive(Args)]
pub struct MigrateArgs {
    /// List the applied and pending migrations without applying any (exit 6 when some
    /// are pending or the database is newer than this idem)
    #[arg(long, visible_alias = "dry-run")]
    status: bool,
    #[command(flatten)]
    format: Format,
}

/// `idem migrate`.
pub async fn run(url: &str, args: MigrateArgs) -> anyhow::Result<ExitCode> {
    if args.status {
        return status(url, args.format).await;
    }
    if args.format.json {
        let why = "--json goes with --status; `idem migrate` itself prints what it applies";
        return Err(fail(Exit::Usage, why));
    }
    migrate(url).await
}

/// `idem migrate --status`: the listing on stdout; a schema that is not current is also
/// the error (stderr, exit 6).
async fn status(url: &str, format: Format) -> anyhow::Result<ExitCode> {
    let store = database::open_store(url).await?;
    let status = store.schema_status().await?;
    store.close().await;
    match format.json {
        true => print_json(&status)?,
        false => print!("{}", render(&status)),
    }
    status.require_current()?;
    Ok(ExitCode::SUCCESS)
}

/// Creates the database if it is missing, prints what is pending, applies it.
async fn migrate(url: &str) -> anyhow::Result<ExitCode> {
    let store = idem::connect_store(url)
        .await
        .with_context(|| format!("cannot open {}", idem_postgres::redact(url)))?;
    let status = store.schema_status().await?;
    if !status.newer.is_empty() {
        status.require_current()?;
    }
    if status.pending.is_empty() {
        say(format!(
            "nothing to apply; the schema is current ({})",
            version(&status)
        ));
        return Ok(ExitCode::SUCCESS);
    }
    say(format!("applying {} migration(s):", status.pending.len()));
    for m in &status.pending {
        say(format!("  {m}"));
    }
    let spinner = crate::progress::spinner("applying migrations");
    let applied = store.migrate().await;
    spinner.finish_and_clear();
    let applied = applied?;
    let after = store.schema_status().await?;
    store.close().await;
    say(format!(
        "applied {applied}; the schema is current ({})",
        version(&after)
    ));
    Ok(ExitCode::SUCCESS)
}

/// The schema's version, e.g. `version 7, 0007_enqueue_key_window`.
fn version(status: &SchemaStatus) -> String {
    match status.applied.last() {
        Some(m) => format!("version {}, {m}", m.version),
        None => "no migration applied".to_owned(),
    }
}

/// The text of `--status`: one line per migration, applied ones first, then what the
/// schema lacks.
fn render(status: &SchemaStatus) -> String {
    let mut table = Table::new(&[
        left("migration", 48),
        left("state", 20),
        left("applied at", 27),
    ]);
    let sections = [
        (&status.applied, "applied"),
        (&status.pending, "pending"),
        (&status.newer, "newer than this idem"),
    ];
    for (list, state) in sections {
        for m in list {
            table.row(vec![m.to_string(), state.to_owned(), time(m.applied_at)]);
        }
    }
    let verdict = match (status.pending.is_empty(), status.newer.is_empty()) {
        (true, true) => "the schema is current".to_owned(),
        (false, _) => format!(
            "{} pending: `idem migrate` applies them",
            status.pending.len()
        ),
        (true, false) => "a newer idem migrated this database: upgrade idem".to_owned(),
    };
    format!("{}{verdict}\n", table.render())
}
