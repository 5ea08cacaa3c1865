//! Ledger facts: deltas turned into immutable entries with running totals.
//!
//! A ledger entry is keyed by the identity of the event it records (`transfer:7:debit`);
//! posting inserts the entry and updates the account's running total in the same
//! transaction, so a duplicate post (a retry, a second delivery) inserts nothing and
//! changes nothing. Totals can be verified against the sum of their entries and rebuilt
//! from them; entries are never purged by idem.

use serde::{Deserialize, Serialize};

use crate::{LeaseToken, Timestamp};

/// Post one entry inside a job's fenced transaction.
#[derive(Debug, Clone)]
pub struct LedgerPost {
    /// The event's identity; unique across the ledger.
    pub entry_key: String,
    /// The account the amount moves.
    pub account: String,
    /// Signed amount in the account's smallest unit.
    pub amount: i64,
    /// The claim posting it (the post is refused when it is not current).
    pub lease: LeaseToken,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// One ledger entry as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// The event's identity.
    pub entry_key: String,
    /// The account.
    pub account: String,
    /// The amount.
    pub amount: i64,
    /// The job that posted it.
    pub job_id: i64,
    /// When it was posted.
    pub created_at: Timestamp,
}

/// The answer to a [`LedgerPost`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerPosted {
    /// The entry was inserted and the total moved.
    New,
    /// An entry with this key exists; nothing changed.
    Duplicate(LedgerEntry),
}

impl LedgerPosted {
    /// Whether this post inserted the entry.
    pub fn is_new(&self) -> bool {
        matches!(self, LedgerPosted::New)
    }
}

/// An account whose running total differs from the sum of its entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerMismatch {
    /// The account.
    pub account: String,
    /// The stored running total (`None`: entries exist but no total).
    pub balance: Option<i64>,
    /// The sum of the account's entries.
    pub sum: i64,
    /// How many entries the account has.
    pub entries: i64,
}
