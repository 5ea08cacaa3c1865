//! How much `idem` says: the global `-v/--verbose` and `-q/--quiet` flags, the log filter
//! they choose, and the chatter (notes, summaries of what an action did) they let through.
//!
//! What must stay true: `-q` leaves only errors on stderr (no progress bar, no note, no
//! log below `error`) and no summary on stdout; data asked for (a list, a show, a
//! `--json` document) is printed whatever the level. `-v` and `-q` conflict. A flag wins
//! over `IDEM_LOG`, which wins over the command's default filter.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{ArgAction, Args};
use tracing_subscriber::EnvFilter;

/// The environment variable holding a log filter (`tracing` directives).
pub const LOG_ENV: &str = "IDEM_LOG";

static QUIET: AtomicBool = AtomicBool::new(false);

/// The global `-v`/`-q` flags.
#[derive(Args, Clone, Copy, Debug, Default)]
pub struct Verbosity {
    /// More log detail on stderr: -v what idem does (info), -vv debug, -vvv everything
    /// (trace). Overrides IDEM_LOG
    #[arg(short, long, action = ArgAction::Count, global = true, conflicts_with = "quiet")]
    pub verbose: u8,
    /// Only errors: no progress bars, notes or summaries of what an action did; the data
    /// asked for (a list, a show, --json) is still printed. Overrides IDEM_LOG
    #[arg(short, long, global = true)]
    pub quiet: bool,
}

impl Verbosity {
    /// Makes this level the process's: [`quiet`] answers from it, and logs go to stderr
    /// through the filter it picks (`default` when neither flag nor `IDEM_LOG` is set).
    /// With the `otel` feature, spans also go to a collector; the guard flushes them.
    pub fn install(self, default: &str) -> crate::otel::Guard {
        use tracing_subscriber::prelude::*;
        QUIET.store(self.quiet, Ordering::Relaxed);
        let logs = tracing_subscriber::fmt::layer()
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .with_filter(self.filter(default));
        let (export, guard) = crate::otel::layer();
        tracing_subscriber::registry()
            .with(logs)
            .with(export)
            .init();
        guard
    }

    /// The log filter: from a flag, else `IDEM_LOG`, else `default`.
    fn filter(self, default: &str) -> EnvFilter {
        match self.directives() {
            Some(flag) => EnvFilter::new(flag),
            None => EnvFilter::try_from_env(LOG_ENV).unwrap_or_else(|_| EnvFilter::new(default)),
        }
    }

    /// The directives a flag asks for; `None` without `-v` or `-q`.
    fn directives(self) -> Option<&'static str> {
        match (self.quiet, self.verbose) {
            (true, _) => Some("error"),
            (false, 0) => None,
            (false, 1) => Some("info,sqlx=warn"),
            (false, 2) => Some("debug,sqlx=info"),
            (false, _) => Some("trace"),
        }
    }
}

/// Whether `-q` was given.
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// Prints a summary of what a command did on stdout, unless `-q`.
pub fn say(text: impl std::fmt::Display) {
    if !quiet() {
        println!("{text}");
    }
}

/// Prints a note on stderr, unless `-q`.
pub fn note(text: impl std::fmt::Display) {
    if !quiet() {
        eprintln!("note: {text}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_picks_its_filter() {
        let at = |quiet, verbose| Verbosity { verbose, quiet }.directives();
        assert_eq!(at(false, 0), None);
        assert_eq!(at(true, 0), Some("error"));
        assert_eq!(at(false, 1), Some("info,sqlx=warn"));
        assert_eq!(at(false, 2), Some("debug,sqlx=info"));
        assert_eq!(at(false, 5), Some("trace"));
    }
}
