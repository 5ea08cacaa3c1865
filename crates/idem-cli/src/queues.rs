//! `idem queues`: job counts per queue and state, then the waiting jobs per queue and
//! kind with how long the oldest has been due. A kind no running worker has a handler
//! for is never claimed: it shows here, waiting, with an age that keeps growing.

use std::process::ExitCode;

use idem::{Idem, QueueCount, QueueWaiting, Timestamp};

use crate::database;
use crate::output::{Format, print_json};
use crate::table::{Table, left, right};

/// `idem queues`.
pub async fn run(url: &str, format: Format) -> anyhow::Result<ExitCode> {
    let idem = database::open(url).await?;
    let counts = idem.queue_counts().await?;
    let waiting = idem.queue_waiting().await?;
    if format.json {
        print_json(&serde_json::json!({ "counts": counts, "waiting": waiting }))?;
        return Ok(ExitCode::SUCCESS);
    }
    print_counts(&counts);
    if !waiting.is_empty() {
        println!();
        print_waiting(&idem, &waiting).await?;
    }
    Ok(ExitCode::SUCCESS)
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
