//! The JSON the API answers with: records as a principal sees them.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use idem::BatchStatus;
use idem_store::{BatchAdded, BatchRow, Enqueued, IntentRow, JobRow, JobState, NewJob, QueueCount};
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
    /// The batch it is a child of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<i64>,
    /// The job whose effect transaction enqueued it (its chain predecessor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follows_job: Option<i64>,
    /// The batch whose successor it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follows_batch: Option<i64>,
    /// The producer's trace context (W3C `traceparent`), for a worker's span to link to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<String>,
    /// What it completed with, when its handler (or worker) gave a result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
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
            batch_id: job.batch_id,
            follows_job: job.follows_job,
            follows_batch: job.follows_batch,
            trace_parent: job.trace_parent,
            result: job.result,
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

impl EnqueuedView {
    /// `enqueued` as `principal` sees it, without its args.
    pub fn of(principal: &Principal, enqueued: Enqueued) -> EnqueuedView {
        let mut job = JobView::of(principal, enqueued.job);
        job.args = None;
        EnqueuedView {
            deduplicated: enqueued.deduplicated,
            job,
        }
    }
}

/// A page of jobs, in the listing's order (newest first; a batch's children oldest
/// first).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JobPage {
    /// The jobs.
    pub jobs: Vec<JobView>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next: Option<i64>,
}

impl JobPage {
    /// A page of at most `limit` of `jobs` (read with one more, which says whether a
    /// next page exists), as `principal` sees them: a job it may not see (another
    /// principal's child in its batch) is left out, and `next` still follows the rows
    /// read.
    pub fn of(principal: &Principal, jobs: Vec<JobRow>, limit: u32) -> JobPage {
        let (jobs, next) = page(jobs, limit, |j| j.id);
        JobPage {
            jobs: jobs
                .into_iter()
                .filter(|j| super::scope::sees_job(principal, j))
                .map(|j| JobView::of(principal, j))
                .collect(),
            next,
        }
    }
}

/// The first `limit` of `rows` (read with one more than a page holds) and, when there
/// was more, the id of the last one kept: where the next page starts.
fn page<T>(mut rows: Vec<T>, limit: u32, id: impl Fn(&T) -> i64) -> (Vec<T>, Option<i64>) {
    if rows.len() <= limit as usize {
        return (rows, None);
    }
    rows.truncate(limit as usize);
    let next = rows.last().map(id);
    (rows, next)
}

/// A batch: children, and the successor enqueued once every child finished.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BatchView {
    /// Store-assigned id.
    pub id: i64,
    /// open (children may be added), sealed (no more children) or finished (every child
    /// finished and the successor was enqueued).
    pub state: String,
    /// Children added so far.
    pub total: i64,
    /// Children completed.
    pub completed: i64,
    /// Children dead.
    pub dead: i64,
    /// Children cancelled.
    pub cancelled: i64,
    /// Children not finished yet (scheduled, available, running or retryable).
    pub unfinished: i64,
    /// summary (the successor runs anyway and reads the outcomes) or failure_successor
    /// (the `on_dead` job runs instead when any child is dead).
    pub on_dead: String,
    /// The job enqueued when the batch finishes.
    pub successor: SuccessorView,
    /// The job enqueued instead when children died, if one was given.
    pub failure_successor: Option<SuccessorView>,
    /// The successor enqueued, once finished (`GET /v1/jobs/{id}` shows it, with
    /// `follows_batch`).
    pub successor_job_id: Option<i64>,
    /// The principal that created it.
    pub principal: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was sealed.
    pub sealed_at: Option<DateTime<Utc>>,
    /// When its last child finished and the successor was enqueued.
    pub finished_at: Option<DateTime<Utc>>,
    /// Children per job state, every state listed (`GET /v1/batches/{id}` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub states: Option<BTreeMap<String, i64>>,
}

impl BatchView {
    /// `row`, without its children's states.
    pub fn of(row: BatchRow) -> BatchView {
        BatchView {
            unfinished: row.unfinished_children(),
            id: row.id,
            state: row.state.as_str().to_string(),
            total: row.total,
            completed: row.completed,
            dead: row.dead,
            cancelled: row.cancelled,
            on_dead: row.on_dead.as_str().to_string(),
            successor: SuccessorView::of(&row.successor),
            failure_successor: row.failure_successor.as_ref().map(SuccessorView::of),
            successor_job_id: row.successor_job_id,
            principal: row.principal,
            created_at: row.created_at,
            sealed_at: row.sealed_at,
            finished_at: row.finished_at,
            states: None,
        }
    }

    /// The batch of `status`, with its children counted in every job state.
    pub fn with_states(status: BatchStatus) -> BatchView {
        let states = JobState::ALL
            .into_iter()
            .map(|s| (s.as_str().to_string(), status.count(s)))
            .collect();
        BatchView {
            states: Some(states),
            ..BatchView::of(status.batch)
        }
    }
}

/// What a batch enqueues when it finishes (`GET /v1/jobs/{id}` of the enqueued job has
/// the rest).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SuccessorView {
    /// Handler name.
    pub kind: String,
    /// Queue.
    pub queue: String,
}

impl SuccessorView {
    fn of(job: &NewJob) -> SuccessorView {
        SuccessorView {
            kind: job.kind.clone(),
            queue: job.queue.clone(),
        }
    }
}

/// A batch and the children a request added, in the order given (a child whose enqueue
/// key was taken is the earlier job, `deduplicated: true`, and is not counted).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BatchAddedView {
    /// The batch after the request.
    pub batch: BatchView,
    /// The children, without their args.
    pub children: Vec<EnqueuedView>,
}

impl BatchAddedView {
    /// `added` as `principal` sees it.
    pub fn of(principal: &Principal, added: BatchAdded) -> BatchAddedView {
        BatchAddedView {
            batch: BatchView::of(added.batch),
            children: added
                .children
                .into_iter()
                .map(|c| EnqueuedView::of(principal, c))
                .collect(),
        }
    }
}

/// A page of batches, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BatchPage {
    /// The batches.
    pub batches: Vec<BatchView>,
    /// Pass as `before` for the next page; absent on the last page.
    pub next: Option<i64>,
}

impl BatchPage {
    /// A page of at most `limit` of `rows` (read with one more).
    pub fn of(rows: Vec<BatchRow>, limit: u32) -> BatchPage {
        let (rows, next) = page(rows, limit, |b| b.id);
        BatchPage {
            batches: rows.into_iter().map(BatchView::of).collect(),
            next,
        }
    }
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
