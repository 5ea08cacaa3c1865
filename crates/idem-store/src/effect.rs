//! Effect deduplication records: the seam's side of effect keys.
//!
//! An effect key names the fact an effect asserts (`receipt-mail:42`). Inside a job's
//! fenced transaction, [`crate::StoreTx::effect_claim`] inserts the key into
//! `idem_effect`; the table's unique key is the only arbiter (no read-then-write), so of
//! all executions that race on one key exactly one sees [`EffectClaimed::New`] and owns
//! the effect, and the others see [`EffectClaimed::Done`] with the record of the one that
//! did it. The record commits or rolls back with the effect.

use serde::{Deserialize, Serialize};

use crate::{LeaseToken, Timestamp};

/// Claim an effect key inside the job's fenced transaction.
#[derive(Debug, Clone)]
pub struct EffectClaim {
    /// The whole key, validated by the engine.
    pub key: String,
    /// The key's kind (its first segment), kept for reports and the instability check.
    pub kind: String,
    /// The claim making the effect.
    pub lease: LeaseToken,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// Who made an effect, as recorded in `idem_effect`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectRecord {
    /// The key.
    pub key: String,
    /// The job whose execution made the effect.
    pub job_id: i64,
    /// The fence of that execution.
    pub fence: i64,
    /// When the record was written.
    pub created_at: Timestamp,
}

/// Parameters of [`crate::Store::effect_list`]: the effect keys one job recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectList {
    /// The job.
    pub job_id: i64,
    /// At most this many, oldest first.
    pub limit: u32,
}

/// The answer to an [`EffectClaim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EffectClaimed {
    /// This execution owns the effect: make it in this same transaction.
    New,
    /// The effect was already made (by this job earlier, or another job).
    Done(EffectRecord),
}

impl EffectClaimed {
    /// Whether this execution owns the effect.
    pub fn is_new(&self) -> bool {
        matches!(self, EffectClaimed::New)
    }
}
