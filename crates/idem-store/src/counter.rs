//! Numbers assigned by the store: a named counter allocated inside the effect's
//! transaction.
//!
//! Unlike a database sequence, whose `nextval` is never rolled back (a failed attempt
//! leaves a gap) and hands a retry a new number, a counter number is tied to an effect
//! key and commits with the effect: an attempt that rolls back gives its number back, and
//! a retry of an effect already done gets the number it got the first time. Allocations
//! on one counter are serialised by the counter's row (PostgreSQL) or the single writer
//! (SQLite) until their transaction ends.

use crate::LeaseToken;
use crate::Timestamp;

/// Allocate the next number of `counter` for the effect `key`, or return the number `key`
/// already has.
#[derive(Debug, Clone)]
pub struct CounterNext {
    /// The counter's name (e.g. `invoice`).
    pub counter: String,
    /// The effect the number belongs to (e.g. `invoice-number:order-42`).
    pub key: String,
    /// The claim allocating it (refused when not current).
    pub lease: LeaseToken,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// A number assigned to an effect key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterAssigned {
    /// The number (the first of a counter is 1).
    pub number: i64,
    /// Whether this call assigned it (`false`: the key already had it).
    pub new: bool,
}
