//! Counters of what idem noticed, for operators: a client and its clones share one set,
//! which its workers' jobs add to, and `Idem::metrics` returns them as a
//! [`MetricsSnapshot`], a plain serializable copy taken at one moment. Each count is
//! also recorded through the `metrics` facade (`metrics.rs`), process-wide.
//!
//! - `unstable_effect_keys`: a retry of a job built a different effect key, of the same
//!   kind, from the one an earlier attempt of the same job committed: the key is built from
//!   something that changes between attempts (an attempt number, a fence, a timestamp), so
//!   the effect may have been made twice.
//! - `duplicate_intents`: reconciliation or the audit found a call to an unkeyed remote
//!   applied more than once, and marked its intent `duplicate`.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// The live counters of one client (shared by its workers).
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    unstable_effect_keys: AtomicU64,
    duplicate_intents: AtomicU64,
}

impl Metrics {
    /// A retry built another key of effect `kind` than an earlier attempt.
    pub(crate) fn unstable_effect_key(&self, kind: &str) {
        self.unstable_effect_keys.fetch_add(1, Ordering::Relaxed);
        super::metrics::unstable_effect_key(kind);
    }

    /// An intent was marked `duplicate`.
    pub(crate) fn duplicate_intent(&self) {
        self.duplicate_intents.fetch_add(1, Ordering::Relaxed);
        super::metrics::duplicate_intent();
    }

    pub(crate) fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            unstable_effect_keys: self.unstable_effect_keys.load(Ordering::Relaxed),
            duplicate_intents: self.duplicate_intents.load(Ordering::Relaxed),
        }
    }
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MetricsSnapshot {
    /// Retries that built an effect key different from the one an earlier attempt of the
    /// same job committed for the same kind.
    pub unstable_effect_keys: u64,
    /// Intents that reconciliation or the audit marked `duplicate`.
    pub duplicate_intents: u64,
}
