//! The JSON the API answers with: records as a principal sees them.

use chrono::{DateTime, Utc};
use idem_store::{IntentRow, JobRow, QueueCount};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::scope::shown_key;
use crate::principal::Principal;

/// A job.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JobView {
    /// Store-assigned id.
    pub id: i64,
    /// Handler name.
    pub kind: String,
    /// Queue.
    pub queue: String,
    /// Handler arguments (left out of an enqueue's answer: `GET /v1/jobs/{id}` has them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub args: Option<serde_json::Value>,
    /// Lower numbers are claimed first.
    pub priority: i16,
    /// scheduled, available, running, retryable, completed, dead or cancelled.
    pub state: String,
    /// Attempts started.
    pub attempt: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// Not claimed before this time.
    pub run_at: DateTime<Utc>,
    /// The fence of the current (or last) claim; every write of a claim carries it.
    pub fence: i64,
    /// The worker holding the lease, while running.
    pub lease_owner: Option<String>,
    /// When the lease ends (database clock), while running.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When the latest attempt started.
    pub attempted_at: Option<DateTime<Utc>>,
    /// When it reached a final state.
    pub finalized_at: Option<DateTime<Utc>>,
    /// The latest failed attempt's error.
    pub last_error: Option<String>,
    /// The enqueue key it was enqueued with.
    pub enqueue_key: Option<String>,
    /// The principal that enqueued it (none for jobs enqueued through the library or CLI).
    pub principal: Option<String>,
}

impl JobView {
    /// `job` as `principal` sees it.
    pub fn of(principal: &Principal, job: JobRow) -> JobView {
        JobView {
            id: job.id,
            kind: job.kind,
            queue: job.queue,
            args: Some(job.args),
            priority: job.priority,
            state: job.state.as_str().to_string(),
            attempt: job.attempt,
            max_attempts: job.max_attempts,
            run_at: job.run_at,
            fence: job.fence,
            lease_owner: job.lease_owner,
            lease_expires_at: job.lease_expires_at,
            created_at: job.created_at,
            attempted_at: job.attempted_at,
            finalized_at: job.finalized_at,
            last_error: job.last_error,
            enqueue_key: job.enqueue_key.map(|k| shown_key(principal, &k)),
            principal: job.principal,
        }
    }
}

/// An enqueued job: new, or the earlier job holding the enqueue key. Its args are left
/// out: the producer sent them, and an answer stored under an Idempotency-Key stays small
/// whatever the job holds.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EnqueuedView {
    /// The job.
    pub job: JobView,
    /// True when the enqueue key was taken inside its window and nothing was inserted.
    pub deduplicated: bool,
}

/// A page of jobs, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JobPage {
    /// The jobs.
    pub jobs: Vec<JobView>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next: Option<i64>,
}

/// An intent.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct IntentView {
    /// The key, as the principal gave it.
    pub key: String,
    /// in_progress, completed, failed, unknown, duplicate, manual or released.
    pub state: String,
    /// A digest of the request.
    pub fingerprint: String,
    /// Whether the remote ignores idempotency keys.
    pub unkeyed: bool,
    /// The intent's own fence; a holder's writes carry it.
    pub fence: i64,
    /// How many holders have begun it.
    pub attempt: i64,
    /// When the holder's lease ends, while in progress.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// The job whose claim holds (or held) it.
    pub job_id: i64,
    /// That claim's fence.
    pub job_fence: i64,
    /// The stored result of a completed call.
    #[schema(value_type = Option<Object>)]
    pub result: Option<serde_json::Value>,
    /// Why it failed, or why its outcome is unknown, duplicate or manual.
    pub error: Option<String>,
    /// The remote's ids for the effect.
    pub remote_refs: Vec<String>,
    /// When it was first reserved.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

impl IntentView {
    /// `row` as `principal` sees it.
    pub fn of(principal: &Principal, row: IntentRow) -> IntentView {
        IntentView {
            key: shown_key(principal, &row.key),
            state: row.state.as_str().to_string(),
            fingerprint: row.fingerprint,
            unkeyed: row.unkeyed,
            fence: row.fence,
            attempt: row.attempt,
            lease_expires_at: row.lease_expires_at,
            job_id: row.job_id,
            job_fence: row.job_fence,
            result: row.result,
            error: row.error,
            remote_refs: row.remote_refs,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

/// Jobs of one queue in one state.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QueueCountView {
    /// The queue.
    pub queue: String,
    /// The state.
    pub state: String,
    /// How many.
    pub count: i64,
}

impl From<QueueCount> for QueueCountView {
    fn from(c: QueueCount) -> Self {
        QueueCountView {
            queue: c.queue,
            state: c.state.as_str().to_string(),
            count: c.count,
        }
    }
}
