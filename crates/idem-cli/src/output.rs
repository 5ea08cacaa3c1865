//! How a list or a show prints: as text for people (tables, `table.rs`; a job in full,
//! `show.rs`), or with `--json` as one JSON document on stdout for programs.
//!
//! What must stay true: with `--json`, stdout holds the JSON document and nothing else;
//! notes and errors go to stderr. Every document is described in `docs/cli-json.md`. A
//! reader that closes the pipe early (`| head`) ends the output quietly.

use std::io::Write;

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
    let text = serde_json::to_string_pretty(value)? + "\n";
    Ok(print_stdout(&text)?)
}

/// Writes `text` on stdout; a closed pipe is not an error (the reader has what it
/// wanted), any other write error is.
pub fn print_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}
