//! How a list or a show prints: as text for people (tables, `table.rs`; a job in full,
//! `show.rs`), or with `--json` as one JSON document on stdout for programs.
//!
//! What must stay true: with `--json`, stdout holds the JSON document and nothing else;
//! notes and errors go to stderr.

use clap::Args;
use serde::Serialize;

/// The `--json` flag of a list or a show.
#[derive(Args, Clone, Copy, Debug, Default)]
pub struct Format {
    /// Print JSON on stdout instead of text (notes and errors stay on stderr)
    #[arg(long)]
    pub json: bool,
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
