//! `idem ledger verify|repair`: running totals checked against the sum of their entries,
//! and rebuilt from them.

use std::process::ExitCode;

use clap::Subcommand;
use idem::LedgerMismatch;

use crate::database;
use crate::exit::Exit;
use crate::output::{Format, print_json};
use crate::table::{Table, left, right};

/// `idem ledger …`.
#[derive(Subcommand)]
pub enum LedgerCommand {
    /// List every account whose running total differs from the sum of its entries (exit 1
    /// when there is one)
    Verify {
        #[command(flatten)]
        format: Format,
    },
    /// Rebuild mismatched totals from their entries (a dry run unless --apply)
    Repair {
        /// Write the rebuilt totals
        #[arg(long)]
        apply: bool,
        #[command(flatten)]
        format: Format,
    },
}

/// `idem ledger …`: exits 1 when `verify` finds mismatches.
pub async fn run(url: &str, cmd: LedgerCommand) -> anyhow::Result<ExitCode> {
    let idem = database::open(url).await?;
    let spinner = crate::progress::spinner("summing the ledger's entries");
    let (found, verb, format) = match cmd {
        LedgerCommand::Verify { format } => (idem.ledger_verify().await, None, format),
        LedgerCommand::Repair { apply, format } => {
            let verb = match apply {
                true => "rebuilt",
                false => "would be rebuilt (dry run; --apply writes)",
            };
            (idem.ledger_repair(apply).await, Some(verb), format)
        }
    };
    spinner.finish_and_clear();
    let found = found?;
    match format.json {
        true => print_json(&found)?,
        false => print_mismatches(&found, verb.unwrap_or("differ")),
    }
    Ok(match (found.is_empty(), verb) {
        (false, None) => Exit::Refused.code(),
        _ => ExitCode::SUCCESS,
    })
}

fn print_mismatches(found: &[LedgerMismatch], verb: &str) {
    if found.is_empty() {
        println!("every running total equals the sum of its entries");
        return;
    }
    let mut table = Table::new(&[
        left("account", 48),
        right("running total"),
        right("sum of entries"),
        right("entries"),
    ]);
    for m in found {
        let total = m.balance.map_or("(none)".to_owned(), |b| b.to_string());
        let cells = [
            m.account.clone(),
            total,
            m.sum.to_string(),
            m.entries.to_string(),
        ];
        table.row(cells.to_vec());
    }
    table.print();
    println!("{} account(s) {verb}", found.len());
}
