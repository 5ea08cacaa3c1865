//! The one error type of the storage seam.
//!
//! Each store translates its driver's errors exactly once (its `interpret_error`) into a
//! variant that says what happened and whether retrying can help
//! ([`StoreError::is_retryable`]). Callers never inspect driver error codes.

/// Result alias for store operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// What went wrong in a store operation.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The job is no longer running under this fence: its lease expired and it was
    /// rescued or reclaimed, or it was cancelled. The write was refused; nothing changed.
    #[error(
        "lease lost on job {job_id}: fence {fence} is no longer the job's current running claim \
         (the lease expired and the job was rescued or reclaimed, or it was cancelled); \
         nothing was written"
    )]
    LeaseLost {
        /// The job the stale claim referred to.
        job_id: i64,
        /// The fence the stale claim carried.
        fence: i64,
    },
    /// The intent is no longer held under this fence: it was taken over after the
    /// holder's lease lapsed, or already finished. The write was refused; nothing changed.
    #[error(
        "intent {key:?} lost: fence {fence} no longer holds it (its lease lapsed and it was \
         taken over, or its outcome was already recorded); nothing was written"
    )]
    IntentLost {
        /// The intent's key.
        key: String,
        /// The fence the stale holder carried.
        fence: i64,
    },
    /// The leadership is no longer held under this fence: its lease ended and another
    /// process may lead. The leader's write was refused; nothing changed.
    #[error(
        "leadership of {name:?} lost: election {fence} of {holder:?} is no longer current \
         (its lease ended, or another process was elected); nothing was written"
    )]
    LeadershipLost {
        /// The duties led.
        name: String,
        /// The stale leader.
        holder: String,
        /// The election it carried.
        fence: i64,
    },
    /// The record does not exist.
    #[error("{what} not found")]
    NotFound {
        /// What was looked for, e.g. `job 42`.
        what: String,
    },
    /// The record is in a state that does not allow the operation (e.g. cancelling a
    /// completed job).
    #[error("{0}")]
    Conflict(String),
    /// A unique constraint refused the write.
    #[error("duplicate: {0}")]
    Duplicate(String),
    /// The database is busy or a serialization conflict occurred; retrying can help.
    #[error("database busy: {0}")]
    Busy(String),
    /// The database cannot be reached; retrying later can help.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The caller passed something the store cannot accept.
    #[error("invalid input: {0}")]
    Invalid(String),
    /// The connection settings are wrong (malformed URL, unknown option).
    #[error("invalid database configuration: {0}")]
    Config(String),
    /// A migration failed.
    #[error("migration failed: {0}")]
    Migration(String),
    /// The database's schema is not this build's: migrations are pending (apply them
    /// with `migrate()`), or a newer idem migrated it (upgrade idem). The message says
    /// which.
    #[error("{0}")]
    SchemaNotCurrent(String),
    /// Any other database error.
    #[error("database error: {0}")]
    Database(String),
}

impl StoreError {
    /// Whether retrying the same operation later can succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Busy(_) | StoreError::Unavailable(_))
    }

    /// Whether this is [`StoreError::LeaseLost`].
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, StoreError::LeaseLost { .. })
    }

    /// [`StoreError::IntentLost`] for `token`.
    pub fn intent_lost(token: &crate::IntentToken) -> Self {
        StoreError::IntentLost {
            key: token.key.clone(),
            fence: token.fence,
        }
    }

    /// Why a cancel of `job_id` changed nothing: `found` is the job as it is now (then it
    /// is already finished), or `None` (it does not exist).
    pub fn cancel_refused(job_id: i64, found: Option<&crate::JobRow>) -> Self {
        match found {
            Some(job) => StoreError::Conflict(format!(
                "job {job_id} is already {}; only unfinished jobs can be cancelled",
                job.state
            )),
            None => StoreError::not_found(format!("job {job_id}")),
        }
    }

    /// [`StoreError::LeaseLost`] for `lease`.
    pub fn lease_lost(lease: crate::LeaseToken) -> Self {
        StoreError::LeaseLost {
            job_id: lease.job_id,
            fence: lease.fence,
        }
    }

    /// [`StoreError::LeadershipLost`] for `token`.
    pub fn leadership_lost(token: &crate::LeaderToken) -> Self {
        StoreError::LeadershipLost {
            name: token.name.clone(),
            holder: token.holder.clone(),
            fence: token.fence,
        }
    }

    /// Shorthand for [`StoreError::NotFound`].
    pub fn not_found(what: impl Into<String>) -> Self {
        StoreError::NotFound { what: what.into() }
    }
}
