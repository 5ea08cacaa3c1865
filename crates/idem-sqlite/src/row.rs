//! Decoding SQLite rows into the seam's records. Timestamps are INTEGER milliseconds.

use chrono::TimeZone;
use idem_store::{AttemptRow, Inserted, JobRow, QueueCount, StoreError, StoreResult, Timestamp};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use crate::error::interpret_error;

/// Milliseconds since the Unix epoch to a timestamp.
pub(crate) fn ms_to_ts(ms: i64) -> StoreResult<Timestamp> {
    chrono::Utc
        .timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| StoreError::Database(format!("timestamp {ms} ms is out of range")))
}

/// A timestamp to milliseconds since the Unix epoch.
pub(crate) fn ts_to_ms(ts: Timestamp) -> i64 {
    ts.timestamp_millis()
}

fn get<'r, T>(row: &'r SqliteRow, col: &str) -> StoreResult<T>
where
    T: sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite>,
{
    row.try_get(col).map_err(interpret_error)
}

fn ts(row: &SqliteRow, col: &str) -> StoreResult<Timestamp> {
    ms_to_ts(get(row, col)?)
}

fn opt_ts(row: &SqliteRow, col: &str) -> StoreResult<Option<Timestamp>> {
    get::<Option<i64>>(row, col)?.map(ms_to_ts).transpose()
}

/// An `idem_job` row.
/// A row of `job/insert.sql`.
pub(crate) fn inserted(row: &SqliteRow) -> StoreResult<Inserted> {
    Ok(Inserted {
        id: get(row, "id")?,
        state: get::<String>(row, "state")?.parse()?,
        run_at: ts(row, "run_at")?,
        created_at: ts(row, "created_at")?,
    })
}

pub(crate) fn job(row: &SqliteRow) -> StoreResult<JobRow> {
    let args: String = get(row, "args")?;
    Ok(JobRow {
        id: get(row, "id")?,
        kind: get(row, "kind")?,
        queue: get(row, "queue")?,
        args: serde_json::from_str(&args)
            .map_err(|e| StoreError::Database(format!("stored args are not JSON: {e}")))?,
        priority: get(row, "priority")?,
        state: get::<String>(row, "state")?.parse()?,
        attempt: get(row, "attempt")?,
        max_attempts: get(row, "max_attempts")?,
        run_at: ts(row, "run_at")?,
        fence: get(row, "fence")?,
        lease_owner: get(row, "lease_owner")?,
        lease_expires_at: opt_ts(row, "lease_expires_at")?,
        batch_id: get(row, "batch_id")?,
        created_at: ts(row, "created_at")?,
        attempted_at: opt_ts(row, "attempted_at")?,
        finalized_at: opt_ts(row, "finalized_at")?,
        last_error: get(row, "last_error")?,
    })
}

/// An `idem_job_attempt` row.
pub(crate) fn attempt(row: &SqliteRow) -> StoreResult<AttemptRow> {
    Ok(AttemptRow {
        job_id: get(row, "job_id")?,
        attempt: get(row, "attempt")?,
        fence: get(row, "fence")?,
        outcome: get::<String>(row, "outcome")?.parse()?,
        error: get(row, "error")?,
        started_at: opt_ts(row, "started_at")?,
        finished_at: ts(row, "finished_at")?,
    })
}

/// A row of `queue/counts.sql`.
pub(crate) fn queue_count(row: &SqliteRow) -> StoreResult<QueueCount> {
    Ok(QueueCount {
        queue: get(row, "queue")?,
        state: get::<String>(row, "state")?.parse()?,
        count: get(row, "count")?,
    })
}
