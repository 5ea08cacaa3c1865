//! `idem intents list|show|resolve`: the records of calls to other services, and the
//! operator's settlement of one whose outcome is unknown.
//!
//! What must stay true: list and show only read. `resolve` settles through the library
//! (`Idem::resolve_intent`), which acts only on an `unknown` or `manual` intent, from the
//! fence it read: an intent in any other state is refused (exit 1) with the library's
//! message, never overridden. A list shows by default the states that need someone
//! (`IntentState::needs_attention`).

use std::process::ExitCode;

use clap::{ArgGroup, Args, Subcommand};
use idem::{Idem, IntentList, IntentResolution, IntentRow, IntentState, StoreError};

use crate::database;
use crate::output::{Format, print_json};
use crate::show::time;
use crate::table::{Table, cell, left, right};
use crate::verbosity::say;

/// `idem intents …`.
#[derive(Subcommand)]
pub enum IntentsCommand {
    /// List intents in key order; by default those that need attention (unknown,
    /// duplicate, manual)
    List(ListArgs),
    /// Show one intent in full: every field, its stored result, the remote's ids
    Show {
        /// The intent's key (e.g. http:job:42)
        key: String,
        #[command(flatten)]
        format: Format,
    },
    /// Settle an unknown or manual intent by hand, after checking the remote yourself
    ///
    /// --applied: the remote has the effect once; the intent completes with the result
    /// {"resolved_by": "operator"} and the ids given, and its job finds it done. --absent:
    /// the remote does not have it; the intent is released and its job sends the call
    /// again with the same key. Either way a job that stopped (dead) to await this is
    /// put back to run. Any other state is refused (exit 1): a call in progress has a
    /// live holder, a settled one needs nothing.
    Resolve(ResolveArgs),
}

/// Arguments of `idem intents list`.
#[derive(Args)]
pub struct ListArgs {
    /// Only this state (repeat for several): unknown, duplicate, manual, in_progress,
    /// completed, failed, released [default: unknown, duplicate, manual]
    #[arg(long = "state", value_name = "STATE", value_parser = state)]
    states: Vec<IntentState>,
    /// Every state
    #[arg(long, conflicts_with = "states")]
    all: bool,
    /// At most this many
    #[arg(long, default_value_t = 50)]
    limit: u32,
    /// Only keys after this one (pagination: the last key of the previous page)
    #[arg(long, value_name = "KEY")]
    after: Option<String>,
    #[command(flatten)]
    format: Format,
}

/// Arguments of `idem intents resolve`.
#[derive(Args)]
#[command(group(ArgGroup::new("found").required(true).args(["applied", "absent"])))]
pub struct ResolveArgs {
    /// The intent's key
    key: String,
    /// The remote has the effect, once
    #[arg(long)]
    applied: bool,
    /// The remote's id of the effect (repeat for several), with --applied
    #[arg(long = "remote-ref", value_name = "ID", conflicts_with = "absent")]
    remote_refs: Vec<String>,
    /// The remote does not have the effect: send it again
    #[arg(long)]
    absent: bool,
    #[command(flatten)]
    format: Format,
}

fn state(text: &str) -> Result<IntentState, String> {
    let names: Vec<&str> = IntentState::ALL.iter().map(|s| s.as_str()).collect();
    IntentState::parse(text).map_err(|_| format!("expected one of {}", names.join(", ")))
}

/// `idem intents …`.
pub async fn run(url: &str, cmd: IntentsCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        IntentsCommand::List(list) => list_intents(&database::open(url).await?, list).await?,
        IntentsCommand::Show { key, format } => {
            show_intent(&database::open(url).await?, &key, format).await?
        }
        IntentsCommand::Resolve(args) => resolve(&database::open(url).await?, args).await?,
    }
    Ok(ExitCode::SUCCESS)
}

impl ListArgs {
    /// The states to list: the flags', every one with `--all`, else those that need
    /// attention.
    fn states(&self) -> Vec<IntentState> {
        match (self.all, self.states.is_empty()) {
            (true, _) => Vec::new(),
            (false, false) => self.states.clone(),
            (false, true) => (IntentState::ALL.into_iter())
                .filter(|s| s.needs_attention())
                .collect(),
        }
    }
}

async fn list_intents(idem: &Idem, list: ListArgs) -> anyhow::Result<()> {
    let rows = idem
        .intents(IntentList {
            states: list.states(),
            after: list.after.clone(),
            limit: list.limit,
            ..IntentList::default()
        })
        .await?;
    if list.format.json {
        return print_json(&rows);
    }
    intent_table(&rows).print();
    Ok(())
}

/// One line per intent; the error cut to one line (`show` has it in full). While in
/// progress, the time is when the holder's lease ends; otherwise when it last changed.
fn intent_table(rows: &[IntentRow]) -> Table {
    let mut table = Table::new(&[
        left("key", 60),
        left("state", 11),
        right("attempt"),
        right("fence"),
        right("job"),
        left("lease end/updated", 27),
        right("refs"),
        left("error", 80),
    ]);
    for r in rows {
        let when = match r.state {
            IntentState::InProgress => r.lease_expires_at,
            _ => Some(r.updated_at),
        };
        table.row(vec![
            r.key.clone(),
            r.state.as_str().to_owned(),
            r.attempt.to_string(),
            r.fence.to_string(),
            r.job_id.to_string(),
            time(when),
            r.remote_refs.len().to_string(),
            r.error.clone().unwrap_or_default(),
        ]);
    }
    table
}

/// The intent `key`; not found (exit 3) when there is none.
async fn intent(idem: &Idem, key: &str) -> anyhow::Result<IntentRow> {
    match idem.intent(key).await? {
        Some(row) => Ok(row),
        None => Err(StoreError::not_found(format!("intent {key:?}")).into()),
    }
}

async fn show_intent(idem: &Idem, key: &str, format: Format) -> anyhow::Result<()> {
    let row = intent(idem, key).await?;
    match format.json {
        true => print_json(&row)?,
        false => print!("{}", render(&row)),
    }
    Ok(())
}

/// An intent for people: the one-line fields, then the remote's ids, the error and the
/// result with every line kept, then what to do if it needs someone.
fn render(r: &IntentRow) -> String {
    let mut out = format!("intent {}\n", cell(&r.key, usize::MAX));
    for (name, value) in fields(r) {
        out += &format!("  {name:<14}{value}\n");
    }
    out += &format!("  remote refs ({})\n", r.remote_refs.len());
    for id in &r.remote_refs {
        out += &format!("    {}\n", cell(id, usize::MAX));
    }
    out += &block("error", r.error.clone());
    let result = r.result.as_ref().map(serde_json::to_string_pretty);
    out += &block("result", result.transpose().unwrap_or_default());
    if r.state.needs_attention() {
        out += &hint(r);
    }
    out
}

fn fields(r: &IntentRow) -> Vec<(&'static str, String)> {
    let remote = match r.unkeyed {
        true => "unkeyed (ignores Idempotency-Key: never sent again blindly)",
        false => "keyed (applies Idempotency-Key once)",
    };
    vec![
        ("state", r.state.as_str().to_owned()),
        ("remote", remote.to_owned()),
        ("attempt", r.attempt.to_string()),
        ("fence", r.fence.to_string()),
        ("job", format!("{} (job fence {})", r.job_id, r.job_fence)),
        ("lease ends", time(r.lease_expires_at)),
        ("created at", time(Some(r.created_at))),
        ("updated at", time(Some(r.updated_at))),
        ("fingerprint", cell(&r.fingerprint, usize::MAX)),
    ]
}

/// A heading and `text` below it, every line indented; `-` when there is none.
fn block(heading: &str, text: Option<String>) -> String {
    match text.as_deref() {
        None | Some("") => format!("  {heading:<14}-\n"),
        Some(text) => {
            let lines: String = text.lines().map(|l| format!("    {l}\n")).collect();
            format!("  {heading}\n{lines}")
        }
    }
}

/// What an operator can do about an intent that needs attention.
fn hint(r: &IntentRow) -> String {
    let key = cell(&r.key, usize::MAX);
    match r.state {
        IntentState::Duplicate => format!(
            "the remote applied this call {} times: undo the extra copies there; idem never \
             picks one\n",
            r.remote_refs.len()
        ),
        _ => format!(
            "settle it: `idem reconcile` looks it up on the remote; or check the remote \
             yourself and run `idem intents resolve {key:?} --applied` or `--absent`\n"
        ),
    }
}

/// `idem intents resolve`: settles the intent, then says its state and whether its job
/// was put back to run.
async fn resolve(idem: &Idem, a: ResolveArgs) -> anyhow::Result<()> {
    let resolution = match a.applied {
        true => IntentResolution::Applied {
            result: serde_json::json!({"resolved_by": "operator"}),
            remote_refs: a.remote_refs,
        },
        false => IntentResolution::Absent,
    };
    let (row, retried) = idem.resolve_intent(&a.key, resolution).await?;
    if a.format.json {
        return print_json(&serde_json::json!({ "intent": row, "job_retried": retried }));
    }
    say(format!(
        "intent {} is {} (fence {})",
        cell(&row.key, usize::MAX),
        row.state,
        row.fence
    ));
    let job = row.job_id;
    say(match (retried, idem.job(job).await?) {
        (true, _) => format!("job {job} was put back to run"),
        (false, Some(j)) => format!("job {job} was not put back to run: it is {}", j.state),
        (false, None) => format!("job {job} no longer exists"),
    });
    Ok(())
}
