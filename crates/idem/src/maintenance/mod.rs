//! Maintenance: the operator actions on the client that the CLI and the worker share.
//!
//! The actions on [`Idem`](crate::Idem): `dead_letter.rs` (retry and discard of dead
//! jobs) and `purge.rs` (purges in bounded batches, which a worker's purger runs too).

mod dead_letter;
mod purge;

pub use dead_letter::{BULK_PAGE, DeadFilter};
pub use purge::DEFAULT_PURGE_BATCH;
