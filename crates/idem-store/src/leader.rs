//! Leadership records: one process at a time leads a group of duties (the maintenance
//! sweeps), elected through a row with a lease and a fence, as a job is claimed.
//!
//! What must stay true: a leadership's fence only grows (a row is never deleted, a
//! resignation only ends its lease), so a leader that lost its lease can never match
//! the current fence again; and a write made for the leader runs in a transaction whose
//! [`crate::StoreTx::leader_check`] holds the leadership row until the commit, so a
//! new leader is elected only after that transaction ends.

use serde::{Deserialize, Serialize};

use crate::Timestamp;

/// Elect `holder` to lead `name` for `ttl_ms`, if nobody leads it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElect {
    /// The duties led (`maintenance`).
    pub name: String,
    /// The candidate (a worker's name).
    pub holder: String,
    /// How long the leadership lasts unless renewed, in milliseconds.
    pub ttl_ms: i64,
    /// When; `None` = the database clock.
    pub now: Option<Timestamp>,
}

/// Who leads a group of duties, and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leadership {
    /// The duties led.
    pub name: String,
    /// The leader.
    pub holder: String,
    /// The election's number: each new leader gets the next one.
    pub fence: i64,
    /// When this leader was elected.
    pub elected_at: Timestamp,
    /// When the leadership ends unless renewed.
    pub expires_at: Timestamp,
    /// The clock the statement judged by (the database's, or the one given).
    pub now: Timestamp,
}

impl Leadership {
    /// The token the leader writes under.
    pub fn token(&self) -> LeaderToken {
        LeaderToken {
            name: self.name.clone(),
            holder: self.holder.clone(),
            fence: self.fence,
        }
    }

    /// Whether it is still in force at its `now`.
    pub fn current(&self) -> bool {
        self.expires_at > self.now
    }
}

/// One election of one leader: what its writes are fenced by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LeaderToken {
    /// The duties led.
    pub name: String,
    /// The leader.
    pub holder: String,
    /// The election's number.
    pub fence: i64,
}

/// Extend a leadership by `ttl_ms` from now, or step down (`ttl_ms` = 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderRenew {
    /// The leadership.
    pub token: LeaderToken,
    /// Its new length from now, in milliseconds; 0 ends it now (a resignation).
    pub ttl_ms: i64,
    /// When; `None` = the database clock.
    pub now: Option<Timestamp>,
}
