//! Exit codes: the one place that decides how `idem` exits for each kind of outcome.
//!
//! What must stay true: the numbers are stable (scripts branch on them), [`TABLE`] (shown
//! by `idem --help`) and the README list the same ones, and every error reaches the
//! process's exit through [`Exit::of`], which maps the library's [`IdemError`] and
//! [`StoreError`] variants here and nowhere else. An error the CLI raises itself carries
//! its class in a [`Failure`].

use std::fmt;
use std::process::ExitCode;

use idem::{IdemError, StoreError};

/// How `idem` exits, by class of outcome. `0` is success; clap exits 2 on its own for a
/// command line it cannot parse, and demo and bench exit 128 + the signal that stopped
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// A check failed or an action was refused: the command ran and the answer is no.
    Refused = 1,
    /// The command line is wrong.
    Usage = 2,
    /// A job id, or the database itself, does not exist.
    NotFound = 3,
    /// The database cannot be reached or stayed busy; retrying later can help.
    Unavailable = 4,
    /// The database URL, the config file or a setting is wrong.
    Config = 5,
    /// The database's schema is not this build's (pending migrations, or newer).
    SchemaNotCurrent = 6,
    /// Anything else.
    Internal = 7,
}

/// The exit codes, for `idem --help` (the README has the same table).
pub const TABLE: &str = "\
Exit codes:
  0  success
  1  a check failed or an action was refused: ledger verify found a mismatch, config
     check refused a window, the demo's verdict is not OK, a job is not in the state the
     action needs (cancel of a finished job; dead retry or discard of a job not dead;
     intents resolve of an intent not unknown or manual), dead retry of jobs too old
     for their effect keys (without --force), reconcile found a duplicate or parked an
     intent manual, a bulk dead retry or discard not confirmed at the prompt
  2  the command line is wrong: an unknown flag, or a value that does not parse (--args
     JSON, --state, --run-at, job ids, --ids-from, …); dead retry or discard --all
     without a terminal and without --yes
  3  not found: a job id, an intent key, or the database (an SQLite file, a PostgreSQL
     database)
  4  unavailable: the database cannot be reached or stayed busy; retrying can help
  5  bad configuration: the database URL, the config file, a setting refused
  6  schema not current: migrations are pending (run `idem migrate`), or a newer idem
     migrated the database (upgrade idem)
  7  any other error
  130, 143  demo or bench stopped by SIGINT, SIGTERM";

impl Exit {
    /// The process exit code.
    pub fn code(self) -> ExitCode {
        ExitCode::from(self as u8)
    }

    /// The class of `e`: the first cause in its chain that has one.
    pub fn of(e: &anyhow::Error) -> Exit {
        e.chain()
            .find_map(|cause| {
                if let Some(f) = cause.downcast_ref::<Failure>() {
                    Some(f.exit)
                } else if let Some(e) = cause.downcast_ref::<IdemError>() {
                    Some(Exit::of_idem(e))
                } else {
                    cause.downcast_ref::<StoreError>().map(Exit::of_store)
                }
            })
            .unwrap_or(Exit::Internal)
    }

    fn of_idem(e: &IdemError) -> Exit {
        match e {
            IdemError::Store(e) => Exit::of_store(e),
            IdemError::Config(_) => Exit::Config,
            IdemError::InvalidJob(_) | IdemError::InvalidKey(_) => Exit::Usage,
            IdemError::IntentMismatch { .. } => Exit::Refused,
            IdemError::RetryRefused(_) => Exit::Refused,
        }
    }

    fn of_store(e: &StoreError) -> Exit {
        match e {
            StoreError::NotFound { .. } => Exit::NotFound,
            StoreError::Conflict(_) => Exit::Refused,
            StoreError::Busy(_) | StoreError::Unavailable(_) => Exit::Unavailable,
            StoreError::Invalid(_) => Exit::Usage,
            StoreError::Config(_) => Exit::Config,
            StoreError::SchemaNotCurrent(_) => Exit::SchemaNotCurrent,
            StoreError::LeaseLost { .. }
            | StoreError::IntentLost { .. }
            | StoreError::LeadershipLost { .. }
            | StoreError::Duplicate(_)
            | StoreError::Migration(_)
            | StoreError::Database(_) => Exit::Internal,
        }
    }
}

/// An error the CLI raises itself, with its class.
#[derive(Debug)]
pub struct Failure {
    exit: Exit,
    message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// An error of class `exit` saying `message`.
pub fn fail(exit: Exit, message: impl fmt::Display) -> anyhow::Error {
    anyhow::Error::new(Failure {
        exit,
        message: message.to_string(),
    })
}

/// Gives a result's error the class `exit` (its message, with its causes, is kept).
pub trait OrExit<T> {
    /// The error, if any, as a [`Failure`] of class `exit`.
    fn or_exit(self, exit: Exit) -> anyhow::Result<T>;
}

impl<T, E: Into<anyhow::Error>> OrExit<T> for Result<T, E> {
    fn or_exit(self, exit: Exit) -> anyhow::Result<T> {
        self.map_err(|e| fail(exit, format!("{:#}", e.into())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn the_class_is_found_under_context() {
        let e = Err::<(), _>(IdemError::Store(StoreError::not_found("job 9")))
            .context("cannot show the job")
            .unwrap_err();
        assert_eq!(Exit::of(&e), Exit::NotFound);
        let e = Err::<(), _>(StoreError::Unavailable("down".into()))
            .context("outer")
            .unwrap_err();
        assert_eq!(Exit::of(&e), Exit::Unavailable);
        assert_eq!(Exit::of(&anyhow::anyhow!("plain")), Exit::Internal);
    }

    #[test]
    fn a_failure_keeps_its_class_and_message() {
        let e = "x".parse::<i64>().or_exit(Exit::Usage).unwrap_err();
        assert_eq!(Exit::of(&e), Exit::Usage);
        assert!(e.to_string().contains("invalid digit"), "{e}");
    }

    #[test]
    fn the_table_lists_every_class() {
        for exit in [
            Exit::Refused,
            Exit::Usage,
            Exit::NotFound,
            Exit::Unavailable,
            Exit::Config,
            Exit::SchemaNotCurrent,
            Exit::Internal,
        ] {
            let line = format!("\n  {} ", exit as u8);
            assert!(TABLE.contains(&line), "no line for {exit:?}");
        }
    }
}
