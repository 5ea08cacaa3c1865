//! Decoding PostgreSQL rows into the seam's records.
//!
//! PostgreSQL dialect: timestamps are `timestamptz`, decoded straight into UTC; `args` is
//! `jsonb`. Columns are found by name (a result of job rows looks them up once), so `SELECT *` and `RETURNING *` stay correct when a
//! migration adds a column. What must stay true: the Rust types here match the schema's
//! widths (priority `smallint` = `i16`, attempt and max_attempts `integer` = `i32`, ids and
//! fences `bigint` = `i64`); sqlx refuses a mismatch at run time.

use idem_store::{
    AttemptRow, BatchRow, Completed, EffectRecord, HttpKeyRow, HttpKeyState, Inserted, IntentRow,
    JobRow, JobState, LeaseRenewal, LedgerEntry, LedgerMismatch, NewJob, QueueCount, QueueFinished,
    QueueWaiting, StoreResult, Timestamp,
};
use sqlx::postgres::PgRow;
use sqlx::{Column, Row};

use crate::error::interpret_error;

/// One column by name.
pub(crate) fn get<'r, T>(row: &'r PgRow, col: &str) -> StoreResult<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(col).map_err(interpret_error)
}

/// A row of `effect/get.sql`.
pub(crate) fn effect(row: &PgRow) -> StoreResult<EffectRecord> {
    Ok(EffectRecord {
        key: get(row, "key")?,
        job_id: get(row, "job_id")?,
        fence: get(row, "fence")?,
        created_at: get(row, "created_at")?,
    })
}

/// Intents of one state (`state`, `count`).
pub(crate) fn intent_count(row: &PgRow) -> StoreResult<idem_store::IntentCount> {
    Ok(idem_store::IntentCount {
        state: get::<String>(row, "state")?.parse()?,
        count: get(row, "count")?,
    })
}

/// An `idem_intent` row.
pub(crate) fn intent(row: &PgRow) -> StoreResult<IntentRow> {
    Ok(IntentRow {
        key: get(row, "key")?,
        state: get::<String>(row, "state")?.parse()?,
        fingerprint: get(row, "fingerprint")?,
        unkeyed: get(row, "unkeyed")?,
        fence: get(row, "fence")?,
        attempt: get(row, "attempt")?,
        lease_expires_at: get(row, "lease_expires_at")?,
        job_id: get(row, "job_id")?,
        job_fence: get(row, "job_fence")?,
        result: get(row, "result")?,
        error: get(row, "error")?,
        remote_refs: get::<sqlx::types::Json<Vec<String>>>(row, "remote_refs")?.0,
        created_at: get(row, "created_at")?,
        updated_at: get(row, "updated_at")?,
    })
}

/// An `idem_http_key` row.
pub(crate) fn http_key(row: &PgRow) -> StoreResult<HttpKeyRow> {
    Ok(HttpKeyRow {
        principal: get(row, "principal")?,
        key: get(row, "key")?,
        fingerprint: get(row, "fingerprint")?,
        state: HttpKeyState::parse(&get::<String>(row, "state")?)?,
        fence: get(row, "fence")?,
        locked_until: get(row, "locked_until")?,
        status: get(row, "status")?,
        headers: get(row, "headers")?,
        body: get(row, "body")?,
        created_at: get(row, "created_at")?,
    })
}

/// A row of `ledger/get_entry.sql`.
pub(crate) fn ledger_entry(row: &PgRow) -> StoreResult<LedgerEntry> {
    Ok(LedgerEntry {
        entry_key: get(row, "entry_key")?,
        account: get(row, "account")?,
        amount: get(row, "amount")?,
        job_id: get(row, "job_id")?,
        created_at: get(row, "created_at")?,
    })
}

/// A row of `ledger/verify.sql`.
pub(crate) fn ledger_mismatch(row: &PgRow) -> StoreResult<LedgerMismatch> {
    Ok(LedgerMismatch {
        account: get(row, "account")?,
        balance: get(row, "balance")?,
        sum: get(row, "sum")?,
        entries: get(row, "entries")?,
    })
}

/// A row of `job/insert.sql`.
pub(crate) fn inserted(row: &PgRow) -> StoreResult<Inserted> {
    Ok(Inserted {
        id: get(row, "id")?,
        state: get::<String>(row, "state")?.parse()?,
        run_at: get(row, "run_at")?,
        created_at: get(row, "created_at")?,
    })
}

/// Jobs from rows, in id order.
pub(crate) fn sorted_jobs(rows: Vec<PgRow>) -> StoreResult<Vec<JobRow>> {
    let mut jobs = self::jobs(&rows)?;
    jobs.sort_by_key(|j| j.id);
    Ok(jobs)
}

/// The `idem_job` columns, in [`JobColumns`]' order.
const JOB_COLUMNS: [&str; 24] = [
    "id",
    "kind",
    "queue",
    "args",
    "priority",
    "state",
    "attempt",
    "max_attempts",
    "run_at",
    "fence",
    "lease_owner",
    "lease_expires_at",
    "batch_id",
    "created_at",
    "attempted_at",
    "finalized_at",
    "last_error",
    "snoozes",
    "enqueue_key",
    "principal",
    "follows_job_id",
    "follows_batch_id",
    "trace_parent",
    "result",
];

/// Where each of [`JOB_COLUMNS`] is in a result's rows: found by name once per result
/// (every row of one statement has the same columns), then read by position.
struct JobColumns([usize; JOB_COLUMNS.len()]);

impl JobColumns {
    fn of(row: &PgRow) -> StoreResult<JobColumns> {
        let mut at = [0; JOB_COLUMNS.len()];
        for (slot, name) in at.iter_mut().zip(JOB_COLUMNS) {
            *slot = row.try_column(name).map_err(interpret_error)?.ordinal();
        }
        Ok(JobColumns(at))
    }

    fn get<'r, T>(&self, row: &'r PgRow, column: usize) -> StoreResult<T>
    where
        T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
    {
        row.try_get(self.0[column]).map_err(interpret_error)
    }

    fn job(&self, row: &PgRow) -> StoreResult<JobRow> {
        Ok(JobRow {
            id: self.get(row, 0)?,
            kind: self.get(row, 1)?,
            queue: self.get(row, 2)?,
            args: self.get(row, 3)?,
            priority: self.get(row, 4)?,
            state: self.get::<&str>(row, 5)?.parse()?,
            attempt: self.get(row, 6)?,
            max_attempts: self.get(row, 7)?,
            run_at: self.get(row, 8)?,
            fence: self.get(row, 9)?,
            lease_owner: self.get(row, 10)?,
            lease_expires_at: self.get(row, 11)?,
            batch_id: self.get(row, 12)?,
            created_at: self.get(row, 13)?,
            attempted_at: self.get(row, 14)?,
            finalized_at: self.get(row, 15)?,
            last_error: self.get(row, 16)?,
            snoozes: self.get(row, 17)?,
            enqueue_key: self.get(row, 18)?,
            principal: self.get(row, 19)?,
            follows_job: self.get(row, 20)?,
            follows_batch: self.get(row, 21)?,
            trace_parent: self.get(row, 22)?,
            result: self.get(row, 23)?,
        })
    }
}

/// `idem_job` rows, in the order given.
pub(crate) fn jobs(rows: &[PgRow]) -> StoreResult<Vec<JobRow>> {
    let Some(first) = rows.first() else {
        return Ok(Vec::new());
    };
    let columns = JobColumns::of(first)?;
    rows.iter().map(|r| columns.job(r)).collect()
}

/// An `idem_job` row.
pub(crate) fn job(row: &PgRow) -> StoreResult<JobRow> {
    JobColumns::of(row)?.job(row)
}

/// A row of `job/complete_many.sql`.
pub(crate) fn completed(row: &PgRow) -> StoreResult<Completed> {
    Ok(Completed {
        job_id: get(row, "id")?,
        batch_id: get(row, "batch_id")?,
    })
}

/// An `idem_batch` row.
pub(crate) fn batch(row: &PgRow) -> StoreResult<BatchRow> {
    let spec = |col: &str| -> StoreResult<Option<NewJob>> {
        get::<Option<sqlx::types::Json<NewJob>>>(row, col).map(|j| j.map(|j| j.0))
    };
    Ok(BatchRow {
        id: get(row, "id")?,
        state: get::<String>(row, "state")?.parse()?,
        total: get(row, "total")?,
        completed: get(row, "completed")?,
        dead: get(row, "dead")?,
        cancelled: get(row, "cancelled")?,
        on_dead: get::<String>(row, "on_dead")?.parse()?,
        successor: spec("successor")?.ok_or_else(|| {
            idem_store::StoreError::Database("a batch row has no successor".into())
        })?,
        failure_successor: spec("failure_successor")?,
        key_window_ms: get(row, "key_window_ms")?,
        successor_job_id: get(row, "successor_job_id")?,
        principal: get(row, "principal")?,
        created_at: get(row, "created_at")?,
        sealed_at: get(row, "sealed_at")?,
        finished_at: get(row, "finished_at")?,
    })
}

/// A row of `batch/states.sql`.
pub(crate) fn state_count(row: &PgRow) -> StoreResult<(JobState, i64)> {
    Ok((get::<String>(row, "state")?.parse()?, get(row, "n")?))
}

/// A row of `job/heartbeat.sql`.
pub(crate) fn renewal(r: &PgRow) -> StoreResult<LeaseRenewal> {
    Ok(LeaseRenewal {
        job_id: get(r, "id")?,
        fence: get(r, "fence")?,
        lease_expires_at: get(r, "lease_expires_at")?,
    })
}

/// An `idem_job_attempt` row.
pub(crate) fn attempt(row: &PgRow) -> StoreResult<AttemptRow> {
    Ok(AttemptRow {
        job_id: get(row, "job_id")?,
        attempt: get(row, "attempt")?,
        fence: get(row, "fence")?,
        outcome: get::<String>(row, "outcome")?.parse()?,
        error: get(row, "error")?,
        started_at: get(row, "started_at")?,
        finished_at: get(row, "finished_at")?,
    })
}

/// A row of `job_attempt/first_started.sql`.
pub(crate) fn first_started(row: &PgRow) -> StoreResult<(i64, Timestamp)> {
    Ok((get(row, "job_id")?, get(row, "started_at")?))
}

/// A row of `queue/waiting.sql`.
pub(crate) fn queue_waiting(row: &PgRow) -> StoreResult<QueueWaiting> {
    Ok(QueueWaiting {
        queue: get(row, "queue")?,
        kind: get(row, "kind")?,
        count: get(row, "count")?,
        oldest_run_at: get(row, "oldest_run_at")?,
    })
}

/// A row of `queue/finished.sql`.
pub(crate) fn queue_finished(row: &PgRow) -> StoreResult<QueueFinished> {
    Ok(QueueFinished {
        queue: get(row, "queue")?,
        completed: get(row, "completed")?,
        dead: get(row, "dead")?,
        timed: get(row, "timed")?,
        run_ms: get(row, "run_ms")?,
        wait_ms: get(row, "wait_ms")?,
    })
}

/// A row of `queue/counts.sql`.
/// A row of `leader/elect.sql`, `current.sql` or `renew.sql`.
pub(crate) fn leadership(row: &PgRow) -> StoreResult<idem_store::Leadership> {
    Ok(idem_store::Leadership {
        name: get(row, "name")?,
        holder: get(row, "holder")?,
        fence: get(row, "fence")?,
        elected_at: get(row, "elected_at")?,
        expires_at: get(row, "expires_at")?,
        now: get(row, "now")?,
    })
}

pub(crate) fn paused_queue(row: &PgRow) -> StoreResult<idem_store::PausedQueue> {
    Ok(idem_store::PausedQueue {
        queue: get(row, "queue")?,
        paused_at: get(row, "paused_at")?,
        paused_by: get(row, "paused_by")?,
    })
}

pub(crate) fn queue_count(row: &PgRow) -> StoreResult<QueueCount> {
    Ok(QueueCount {
        queue: get(row, "queue")?,
        state: get::<String>(row, "state")?.parse()?,
        count: get(row, "count")?,
    })
}
