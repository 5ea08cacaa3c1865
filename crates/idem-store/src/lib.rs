//! The storage seam of idem.
//!
//! This crate owns the vocabulary every store speaks: the records ([`JobRow`],
//! [`AttemptRow`]), the parameter structs of every operation, the [`Store`] and
//! [`StoreTx`] traits, and the one error type [`StoreError`]. It holds no SQL and no
//! runtime, so each store crate (`idem-sqlite`, `idem-postgres`) depends on this crate
//! alone and the compiler enforces the direction of dependencies.
//!
//! What must stay true:
//! - every write on a leased job is guarded by state *and* fence in the store's `WHERE`
//!   clause; zero rows changed is [`StoreError::LeaseLost`], never silence;
//! - time comes in the parameters (`now: Option<Timestamp>`); `None` means the database
//!   clock, so leases are never judged on a worker's clock;
//! - every operation runs inside a transaction: [`Store`]'s write methods are thin
//!   wrappers that open one, call the [`StoreTx`] method and commit.
#![warn(missing_docs)]

#[cfg(all(
    any(feature = "chaos-break-fence", feature = "chaos-break-effect-key"),
    not(debug_assertions)
))]
compile_error!(
    "the features chaos-break-fence and chaos-break-effect-key are test-only broken builds \
     and cannot be enabled in a release build"
);

pub mod batch;
#[cfg(any(feature = "chaos-break-fence", feature = "chaos-break-effect-key"))]
pub mod chaos;
mod counter;
mod effect;
pub mod enqueue;
mod error;
pub mod fast_path;
pub mod http_key;
pub mod intent;
mod job;
mod leader;
mod ledger;
mod maintenance;
pub mod migration;
mod queue;
mod store;
pub mod testing;
mod value;

pub use batch::{
    BatchAdd, BatchAdded, BatchChildren, BatchCount, BatchCreate, BatchFinish, BatchInsert,
    BatchList, BatchRow, BatchSeal, BatchState, BatchTally, OnDead, ShardCount,
};
pub use counter::{CounterAssigned, CounterNext};
pub use effect::{EffectClaim, EffectClaimed, EffectList, EffectRecord};
pub use error::{StoreError, StoreResult};
pub use http_key::{
    HttpKeyComplete, HttpKeyRelease, HttpKeyReserve, HttpKeyReserved, HttpKeyRow, HttpKeyState,
};
pub use intent::{
    IntentBegin, IntentBegun, IntentCount, IntentFinish, IntentList, IntentOutcome, IntentRenew,
    IntentResolution, IntentResolve, IntentRow, IntentState, IntentToken,
};
pub use job::{
    AttemptOutcome, AttemptRow, Awaited, Completed, EnqueueKeyTake, Enqueued, InsertClaim,
    Inserted, JobCancel, JobClaim, JobComplete, JobCompleteMany, JobFail, JobHeartbeat, JobInsert,
    JobList, JobLock, JobRescue, JobRow, JobState, LeaseRenewal, LeaseToken, NewJob, QueueCount,
    QueueFinished, QueueFinishedList, QueueWaiting, RESCUE_ERROR_PREFIX,
};
pub use leader::{LeaderElect, LeaderRenew, LeaderToken, Leadership};
pub use ledger::{LedgerEntry, LedgerMismatch, LedgerPost, LedgerPosted};
pub use maintenance::{JobDiscard, JobPutBack, JobRetry, Purge, PurgeTarget};
pub use queue::{PausedQueue, QueuePause};
pub use store::{Store, StoreTx, Wakeups};
pub use value::SqlValue;

/// A point in time, always UTC. Stores keep milliseconds at least.
pub type Timestamp = chrono::DateTime<chrono::Utc>;

/// Which store implementation a [`Store`] is; used in reports and test names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Embedded SQLite (`sqlite://path`).
    Sqlite,
    /// PostgreSQL (`postgres://…`).
    Postgres,
}

impl Backend {
    /// The store a database URL names, by its scheme (`sqlite:`, `postgres://`,
    /// `postgresql://`), ignoring surrounding whitespace; `None` for any other.
    pub fn of_url(url: &str) -> Option<Backend> {
        let url = url.trim();
        if url.starts_with("sqlite:") {
            Some(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Some(Backend::Postgres)
        } else {
            None
        }
    }

    /// The short lowercase name (`sqlite`, `postgres`).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::Backend;

    #[test]
    fn a_url_names_its_store_by_scheme() {
        assert_eq!(Backend::of_url("sqlite://idem.db"), Some(Backend::Sqlite));
        assert_eq!(Backend::of_url(" postgres://h/db"), Some(Backend::Postgres));
        assert_eq!(
            Backend::of_url("postgresql://h/db\n"),
            Some(Backend::Postgres)
        );
        assert_eq!(Backend::of_url("mysql://h/db"), None);
    }
}
