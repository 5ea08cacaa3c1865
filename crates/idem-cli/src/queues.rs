//! `idem queues`: job counts per queue and state, then the waiting jobs per queue and
//! kind with how long the oldest has been due, then the paused queues. A kind no running
//! worker has a handler for is never claimed: it shows here, waiting, with an age that
//! keeps growing. `idem queues pause|resume QUEUE` steers a queue.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use idem::{Idem, PausedQueue, QueueCount, QueueWaiting, Timestamp};

use crate::database;
use crate::output::{Format, print_json};
use crate::table::{Table, left, right};
use crate::verbosity::say;

/// Arguments of `idem queues`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct QueuesArgs {
    #[command(subcommand)]
    action: Option<QueuesCommand>,
    #[command(flatten)]
    format: Format,
}

#[derive(Subcommand)]
enum QueuesCommand {
    /// Stop claims from QUEUE in every worker until it is resumed; enqueues go on and
    /// running jobs finish (already paused: says so, exit 0)
    Pause {
        /// The queue
        queue: String,
        #[command(flatten)]
        format: Format,
    },
    /// Let workers claim from QUEUE again, and wake those that serve it (not paused:
    /// says so, exit 0)
    Resume {
        /// The queue
        queue: String,
        #[command(flatten)]
        format: Format,
    },
}

/// `idem queues`.
pub async fn run(url: &str, args: QueuesArgs) -> anyhow::Result<ExitCode> {
    let idem = database::open(url).await?;
    match args.action {
        None => list(&idem, args.format).await,
        Some(QueuesCommand::Pause { queue, format }) => {
            let changed = idem.pause_queue(&queue, Some("cli")).await?;
            steered(&queue, "paused", changed, format)
        }
        Some(QueuesCommand::Resume { queue, format }) => {
            let changed = idem.resume_queue(&queue).await?;
            // Wakes the workers of other processes before this one exits.
            idem.close().await;
            steered(&queue, "resumed", changed, format)
        }
    }
}

async fn list(idem: &Idem, format: Format) -> anyhow::Result<ExitCode> {
    let counts = idem.queue_counts().await?;
    let waiting = idem.queue_waiting().await?;
    let paused = idem.paused_queues().await?;
    if format.json {
        let all = serde_json::json!({ "counts": counts, "waiting": waiting, "paused": paused });
        print_json(&all)?;
        return Ok(ExitCode::SUCCESS);
    }
    print_counts(&counts);
    if !waiting.is_empty() {
        println!();
        print_waiting(idem, &waiting).await?;
    }
    if !paused.is_empty() {
        println!();
        print_paused(&paused);
    }
    Ok(ExitCode::SUCCESS)
}

/// Reports a pause or resume: `changed` false when the queue already stood so.
fn steered(queue: &str, done: &str, changed: bool, format: Format) -> anyhow::Result<ExitCode> {
    if format.json {
        print_json(&serde_json::json!({ "queue": queue, "state": done, "changed": changed }))?;
    } else if changed {
        say(format!("queue {queue:?} {done}"));
    } else if done == "paused" {
        say(format!(
            "queue {queue:?} was paused already; nothing changed"
        ));
    } else {
        say(format!("queue {queue:?} was not paused; nothing changed"));
    }
    Ok(ExitCode::SUCCESS)
}

fn print_paused(paused: &[PausedQueue]) {
    let mut table = Table::new(&[left("paused queue", 32), left("since", 24), left("by", 16)]);
    for p in paused {
        let since = p.paused_at.format("%Y-%m-%d %H:%M:%S UTC").to_string();
        let by = p.paused_by.clone().unwrap_or_else(|| "-".into());
        table.row(vec![p.queue.clone(), since, by]);
    }
    table.print();
}

fn print_counts(counts: &[QueueCount]) {
    let mut table = Table::new(&[left("queue", 32), left("state", 10), right("jobs")]);
    for c in counts {
        let cells = vec![
            c.queue.clone(),
            c.state.as_str().to_owned(),
            c.count.to_string(),
        ];
        table.row(cells);
    }
    table.print();
}

async fn print_waiting(idem: &Idem, waiting: &[QueueWaiting]) -> anyhow::Result<()> {
    let now = idem.store().now().await?;
    let columns = [left("queue", 32), left("waiting kind", 32), right("jobs")];
    let mut table = Table::new(&[columns[0], columns[1], columns[2], left("oldest", 24)]);
    for w in waiting {
        let cells = vec![w.queue.clone(), w.kind.clone(), w.count.to_string()];
        table.row([cells, vec![due(w.oldest_run_at, now)]].concat());
    }
    table.print();
    Ok(())
}

/// How long ago `run_at` was (`due 5m ago`), or how far ahead (`due in 2h`).
fn due(run_at: Timestamp, now: Timestamp) -> String {
    let (ahead, span) = match (run_at - now).to_std() {
        Ok(d) => (true, d),
        Err(_) => (false, (now - run_at).to_std().unwrap_or_default()),
    };
    let span = std::time::Duration::from_secs(span.as_secs());
    let span = idem::config::human(span);
    if ahead {
        format!("due in {span}")
    } else {
        format!("due {span} ago")
    }
}
