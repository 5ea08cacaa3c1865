//! Errors of the public API ([`IdemError`]) and what a handler returns ([`JobError`]).
//!
//! A handler's `?` on an [`IdemError`] becomes a [`JobError`] that keeps the distinction
//! that matters to the engine: a lost lease is not a failure of the job (the write was
//! refused and another claim owns the job), so the engine records nothing for it.

use std::time::Duration;

use idem_store::StoreError;

use crate::maintenance::RetryRefused;

/// An error from idem's API.
#[derive(Debug, thiserror::Error)]
pub enum IdemError {
    /// The store refused or failed the operation.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A configuration value is invalid; the message names it and what to do.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A job to enqueue is invalid; the message names the field.
    #[error("invalid job: {0}")]
    InvalidJob(String),
    /// An effect key is invalid; the message says why and what to do.
    #[error("invalid effect key: {0}")]
    InvalidKey(String),
    /// The intent's key is held for a different request (another fingerprint): the same
    /// key must name the same request. Nothing was sent or changed.
    #[error(
        "intent {key:?} is held for a different request (fingerprint {stored}, this one \
         {given}): a key names one logical request, so give a changed request a new key \
         (for example `…:rev:2`)"
    )]
    IntentMismatch {
        /// The key.
        key: String,
        /// The fingerprint stored with it.
        stored: String,
        /// This request's fingerprint.
        given: String,
    },
    /// An operator retry was refused, and nothing retried: some jobs first ran too long
    /// ago for their effect keys to outlive a new retry horizon. The message names them,
    /// the durations and the way out (a forced retry).
    #[error(transparent)]
    RetryRefused(Box<RetryRefused>),
}

impl IdemError {
    /// Whether this is a refused write of a stale claim.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, IdemError::Store(e) if e.is_lease_lost())
    }
}

/// What kind of failure a handler reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobErrorKind {
    /// Try again along the retry ladder (or after the given delay).
    Retry,
    /// Do not try again: the job goes to `dead`.
    Permanent,
    /// The claim was lost; another worker owns the job. Nothing is recorded.
    LeaseLost,
    /// Run again after a delay without spending an attempt or a rung of the ladder
    /// (up to the worker's `max_snoozes`; beyond them, a failed attempt).
    Snooze,
}

/// The error a handler returns.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct JobError {
    /// Retry, permanent, snooze or lease lost.
    pub kind: JobErrorKind,
    /// What went wrong, kept in the attempt history and (except for a snooze) as the
    /// job's `last_error`.
    pub message: String,
    /// For [`JobErrorKind::Retry`]: run again after this delay instead of the ladder's.
    /// For [`JobErrorKind::Snooze`]: the snooze.
    pub retry_after: Option<Duration>,
    /// The intent whose settlement the job waits for (a call whose outcome is unknown):
    /// if it was settled while this attempt ended, the worker puts the job back to run.
    pub awaits: Option<String>,
}

impl JobError {
    /// A failure worth retrying along the ladder.
    pub fn retry(e: impl std::fmt::Display) -> Self {
        JobError {
            kind: JobErrorKind::Retry,
            message: e.to_string(),
            retry_after: None,
            awaits: None,
        }
    }

    /// A failure worth retrying after `delay` instead of the ladder's delay.
    ///
    /// The worker clamps `delay` to its `max_retry_after` (default 1 h), with a warning
    /// and a note in the attempt's error: every delay a job can take counts in the retry
    /// horizon that the effect-key window must cover, so an unbounded delay could
    /// outlive a key and repeat its effect. To run much later, enqueue a new job with a
    /// `run_at` instead.
    pub fn retry_after(delay: Duration, e: impl std::fmt::Display) -> Self {
        JobError {
            retry_after: Some(delay),
            ..JobError::retry(e)
        }
    }

    /// A failure that retrying cannot fix: the job goes straight to `dead`.
    pub fn permanent(e: impl std::fmt::Display) -> Self {
        JobError {
            kind: JobErrorKind::Permanent,
            message: e.to_string(),
            retry_after: None,
            awaits: None,
        }
    }

    /// Not now: run the job again after `delay` without spending an attempt or a rung
    /// of the ladder (waiting for a resource, a rate limit, a time of day). The attempt
    /// history records it as `snoozed`.
    ///
    /// Bounded like [`retry_after`](Self::retry_after): the worker clamps `delay` to its
    /// `max_snooze` (default 1 h), and a job may take `max_snoozes` snoozes (default
    /// 10, counted per job and reset by an operator retry); a snooze beyond them counts
    /// as a failed attempt along the ladder, so a job that always snoozes ends in `dead`.
    pub fn snooze(delay: Duration) -> Self {
        JobError {
            kind: JobErrorKind::Snooze,
            message: format!("snoozed for {}", crate::config::human(delay)),
            retry_after: Some(delay),
            awaits: None,
        }
    }

    /// Whether the claim was lost.
    pub fn is_lease_lost(&self) -> bool {
        self.kind == JobErrorKind::LeaseLost
    }
}

impl From<IdemError> for JobError {
    fn from(e: IdemError) -> Self {
        match e {
            IdemError::Store(s) => s.into(),
            other => JobError::permanent(other),
        }
    }
}

impl From<StoreError> for JobError {
    fn from(e: StoreError) -> Self {
        let kind = match &e {
            StoreError::LeaseLost { .. } => JobErrorKind::LeaseLost,
            StoreError::Invalid(_) => JobErrorKind::Permanent,
            _ => JobErrorKind::Retry,
        };
        JobError {
            kind,
            message: e.to_string(),
            retry_after: None,
            awaits: None,
        }
    }
}
