//! Operator and maintenance operations: dead-letter retry and discard, and purges of
//! records older than their retention.
//!
//! Purges delete by range on an indexed time column, at most `limit` rows per call, so a
//! caller deletes a large backlog in bounded transactions. Dedup records (enqueue keys,
//! effect keys) are purged only once older than their window; effect data (ledger
//! entries, store-assigned numbers) is never purged by idem.

use serde::{Deserialize, Serialize};

use crate::Timestamp;

/// Put dead or cancelled jobs back to `available` with a fresh ladder and no snoozes.
#[derive(Debug, Clone, Default)]
pub struct JobRetry {
    /// The jobs. Those not dead or cancelled are left alone and absent from the result.
    pub ids: Vec<i64>,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// Put every dead job awaiting an intent back to `available`, as [`JobRetry`] would: the
/// intent was settled.
#[derive(Debug, Clone, Default)]
pub struct JobPutBack {
    /// The intent's key.
    pub key: String,
    /// Injected time, `None` = database clock.
    pub now: Option<Timestamp>,
}

/// Delete dead jobs with their attempt history and their enqueue keys.
#[derive(Debug, Clone, Default)]
pub struct JobDiscard {
    /// The jobs. Those not dead are left alone and absent from the result.
    pub ids: Vec<i64>,
}

/// What a purge deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PurgeTarget {
    /// Enqueue keys (`idem_enqueue_key`) whose window started before the cutoff (the
    /// later of the key's creation and its job's `run_at`).
    EnqueueKeys,
    /// Effect dedup records (`idem_effect`) created before the cutoff, except those of a
    /// job that may still run again (it exists and is not completed): a late attempt of
    /// that job must find the key its earlier attempt committed.
    EffectKeys,
    /// Intents (`idem_intent`) completed, failed or released, created and last changed
    /// before the cutoff, except those of a job that may still run again. Intents in progress,
    /// unknown, duplicate or manual are kept: they await their holder, a reconciler or
    /// an operator.
    Intents,
    /// Completed and cancelled jobs finalized before the cutoff, with their attempts and
    /// any enqueue key they still hold.
    FinishedJobs,
    /// Dead jobs finalized before the cutoff, with their attempts and any enqueue key
    /// they still hold. A job whose intent is in progress, unknown or manual is kept:
    /// reconciliation needs it; so is one awaiting such an intent of another job's.
    DeadJobs,
    /// Inbound Idempotency-Key records (`idem_http_key`) created before the cutoff,
    /// whatever their state, except a reservation whose lock outlives the cutoff (a
    /// request that may still be running keeps its key).
    HttpKeys,
    /// Batches (`idem_batch`, with their shard counts) finished before the cutoff (the
    /// finished jobs' window). Open and sealed batches are kept.
    Batches,
}

impl PurgeTarget {
    /// Every target, in the order a purge runs them.
    pub const ALL: [PurgeTarget; 7] = [
        PurgeTarget::EnqueueKeys,
        PurgeTarget::EffectKeys,
        PurgeTarget::Intents,
        PurgeTarget::FinishedJobs,
        PurgeTarget::DeadJobs,
        PurgeTarget::HttpKeys,
        PurgeTarget::Batches,
    ];

    /// The name used in reports and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            PurgeTarget::EnqueueKeys => "enqueue-keys",
            PurgeTarget::EffectKeys => "effect-keys",
            PurgeTarget::Intents => "intents",
            PurgeTarget::FinishedJobs => "finished-jobs",
            PurgeTarget::DeadJobs => "dead-jobs",
            PurgeTarget::HttpKeys => "http-keys",
            PurgeTarget::Batches => "batches",
        }
    }
}

impl std::fmt::Display for PurgeTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Delete up to `limit` records of one target older than `before`.
#[derive(Debug, Clone, Copy)]
pub struct Purge {
    /// What to delete.
    pub target: PurgeTarget,
    /// Records created (effect keys), whose window started (enqueue keys) or finalized
    /// (jobs) strictly before this time.
    pub before: Timestamp,
    /// At most this many records (jobs count, not their attempts).
    pub limit: u32,
}
