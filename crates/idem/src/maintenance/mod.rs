//! Maintenance: the long-running duties that are services of their own, each with one
//! owner, and the operator actions they share with the CLI.
//!
//! The services, one file each (as River keeps `internal/maintenance/job_rescuer.go`
//! and `job_cleaner.go`): `rescuer.rs` moves jobs whose lease expired back to
//! `retryable`, `purger.rs` deletes records past their retention. Every worker runs
//! them beside its claim loops, with `elector.rs`, and they act only while its process
//! leads the maintenance duties, so that one process sweeps for all. A service takes
//! what it needs (the client, its interval, a stop signal, the leadership it acts
//! under, its owner's name) and nothing of the worker's.
//!
//! The actions on [`Idem`](crate::Idem): `dead_letter.rs` (retry and discard of dead
//! jobs) and `purge.rs` (purges in bounded batches, which the purger runs too).
//!
//! What must stay true: a service stops when its stop signal changes, without waiting
//! for a whole sweep of a large backlog; a service's failure is logged and retried at
//! its next interval, never fatal to its owner.

mod dead_letter;
mod elector;
mod purge;
mod purger;
mod rescuer;

pub use dead_letter::{BULK_PAGE, DeadFilter, RetryRefused};
pub(crate) use elector::{Elector, candidate};
pub use purge::DEFAULT_PURGE_BATCH;
pub(crate) use purger::Purger;
pub(crate) use rescuer::Rescuer;
