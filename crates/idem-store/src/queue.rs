//! Queue records: pausing and resuming a queue, and the paused queues.

use serde::{Deserialize, Serialize};

use crate::Timestamp;

/// Pause a queue: claims from it stop; enqueues into it go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePause {
    /// The queue.
    pub queue: String,
    /// Who paused it (an API principal, `cli`), if known.
    pub by: Option<String>,
    /// When; `None` = the database clock.
    pub now: Option<Timestamp>,
}

/// A paused queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PausedQueue {
    /// The queue.
    pub queue: String,
    /// When it was paused.
    pub paused_at: Timestamp,
    /// Who paused it, if known.
    pub paused_by: Option<String>,
}
