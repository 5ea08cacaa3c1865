//! `idem queues`: job counts per queue and state.

use std::process::ExitCode;

use crate::database;
use crate::output::{Format, print_json};
use crate::table::{Table, left, right};

/// `idem queues`.
pub async fn run(url: &str, format: Format) -> anyhow::Result<ExitCode> {
    let counts = database::open(url).await?.queue_counts().await?;
    if format.json {
        print_json(&counts)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut table = Table::new(&[left("queue", 32), left("state", 10), right("jobs")]);
    for c in &counts {
        table.row(vec![
            c.queue.clone(),
            c.state.as_str().to_owned(),
            c.count.to_string(),
        ]);
    }
    table.print();
    Ok(ExitCode::SUCCESS)
}
