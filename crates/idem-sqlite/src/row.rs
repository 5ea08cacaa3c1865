//! Decoding SQLite rows into the seam's records. Timestamps are INTEGER milliseconds.

use chrono::TimeZone;
use idem_store::{
    AttemptRow, BatchRow, Completed, EffectRecord, HttpKeyRow, Inserted, IntentRow, JobRow,
    JobState, LeaseRenewal, LedgerEntry, LedgerMismatch, QueueCount, QueueFinished, QueueWaiting,
    StoreError, StoreResult, Timestamp,
};
use rusqlite::Row;
use rusqlite::types::FromSql;

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

fn get<T: FromSql>(row: &Row<'_>, col: &str) -> StoreResult<T> {
    row.get(col).map_err(interpret_error)
}

fn ts(row: &Row<'_>, col: &str) -> StoreResult<Timestamp> {
    ms_to_ts(get(row, col)?)
}

fn opt_ts(row: &Row<'_>, col: &str) -> StoreResult<Option<Timestamp>> {
    get::<Option<i64>>(row, col)?.map(ms_to_ts).transpose()
}

/// JSON text in a column, decoded.
fn json<T: serde::de::DeserializeOwned>(text: &str, col: &str) -> StoreResult<T> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::Database(format!("stored {col} is not the JSON expected: {e}")))
}

/// An `idem_intent` row.
pub(crate) fn intent(row: &Row<'_>) -> StoreResult<IntentRow> {
    let result: Option<String> = get(row, "result")?;
    let refs: String = get(row, "remote_refs")?;
    Ok(IntentRow {
        key: get(row, "key")?,
        state: get::<String>(row, "state")?.parse()?,
        fingerprint: get(row, "fingerprint")?,
        unkeyed: get(row, "unkeyed")?,
        fence: get(row, "fence")?,
        attempt: get(row, "attempt")?,
        lease_expires_at: opt_ts(row, "lease_expires_at")?,
        job_id: get(row, "job_id")?,
        job_fence: get(row, "job_fence")?,
        result: result.map(|r| json(&r, "result")).transpose()?,
        error: get(row, "error")?,
        remote_refs: json(&refs, "remote_refs")?,
        created_at: ts(row, "created_at")?,
        updated_at: ts(row, "updated_at")?,
    })
}

/// An `idem_http_key` row.
pub(crate) fn http_key(row: &Row<'_>) -> StoreResult<HttpKeyRow> {
    let headers: Option<String> = get(row, "headers")?;
    Ok(HttpKeyRow {
        principal: get(row, "principal")?,
        key: get(row, "key")?,
        fingerprint: get(row, "fingerprint")?,
        state: idem_store::HttpKeyState::parse(&get::<String>(row, "state")?)?,
        fence: get(row, "fence")?,
        locked_until: ts(row, "locked_until")?,
        status: get(row, "status")?,
        headers: headers.map(|h| json(&h, "headers")).transpose()?,
        body: get(row, "body")?,
        created_at: ts(row, "created_at")?,
    })
}

/// A row of `http_key/get.sql`: the record and the clock it was judged by.
pub(crate) fn http_key_held(row: &Row<'_>) -> StoreResult<(HttpKeyRow, Timestamp)> {
    Ok((http_key(row)?, ts(row, "now")?))
}

/// A row of `ledger/get_entry.sql`.
pub(crate) fn ledger_entry(row: &Row<'_>) -> StoreResult<LedgerEntry> {
    Ok(LedgerEntry {
        entry_key: get(row, "entry_key")?,
        account: get(row, "account")?,
        amount: get(row, "amount")?,
        job_id: get(row, "job_id")?,
        created_at: ts(row, "created_at")?,
    })
}

/// A row of `ledger/verify.sql`.
pub(crate) fn ledger_mismatch(row: &Row<'_>) -> StoreResult<LedgerMismatch> {
    Ok(LedgerMismatch {
        account: get(row, "account")?,
        balance: get(row, "balance")?,
        sum: get(row, "sum")?,
        entries: get(row, "entries")?,
    })
}

/// A row of `effect/get.sql`.
pub(crate) fn effect(row: &Row<'_>) -> StoreResult<EffectRecord> {
    Ok(EffectRecord {
        key: get(row, "key")?,
        job_id: get(row, "job_id")?,
        fence: get(row, "fence")?,
        created_at: ts(row, "created_at")?,
    })
}

/// A row of `job/insert.sql`.
pub(crate) fn inserted(row: &Row<'_>) -> StoreResult<Inserted> {
    Ok(Inserted {
        id: get(row, "id")?,
        state: get::<String>(row, "state")?.parse()?,
        run_at: ts(row, "run_at")?,
        created_at: ts(row, "created_at")?,
    })
}

/// An `idem_job` row.
pub(crate) fn job(row: &Row<'_>) -> StoreResult<JobRow> {
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
        snoozes: get(row, "snoozes")?,
        enqueue_key: get(row, "enqueue_key")?,
        principal: get(row, "principal")?,
        follows_job: get(row, "follows_job_id")?,
        follows_batch: get(row, "follows_batch_id")?,
        result: get::<Option<String>>(row, "result")?
            .map(|r| json(&r, "result"))
            .transpose()?,
    })
}

/// A row of `job/complete_many.sql`.
pub(crate) fn completed(row: &Row<'_>) -> StoreResult<Completed> {
    Ok(Completed {
        job_id: get(row, "id")?,
        batch_id: get(row, "batch_id")?,
    })
}

/// A row of `job/states.sql`.
pub(crate) fn job_state(row: &Row<'_>) -> StoreResult<(i64, JobState)> {
    Ok((get(row, "id")?, get::<String>(row, "state")?.parse()?))
}

/// An `idem_batch` row.
pub(crate) fn batch(row: &Row<'_>) -> StoreResult<BatchRow> {
    let successor: String = get(row, "successor")?;
    let failure: Option<String> = get(row, "failure_successor")?;
    Ok(BatchRow {
        id: get(row, "id")?,
        state: get::<String>(row, "state")?.parse()?,
        total: get(row, "total")?,
        completed: get(row, "completed")?,
        dead: get(row, "dead")?,
        cancelled: get(row, "cancelled")?,
        on_dead: get::<String>(row, "on_dead")?.parse()?,
        successor: json(&successor, "successor")?,
        failure_successor: failure.map(|f| json(&f, "failure_successor")).transpose()?,
        key_window_ms: get(row, "key_window_ms")?,
        successor_job_id: get(row, "successor_job_id")?,
        principal: get(row, "principal")?,
        created_at: ts(row, "created_at")?,
        sealed_at: opt_ts(row, "sealed_at")?,
        finished_at: opt_ts(row, "finished_at")?,
    })
}

/// A row of `batch/states.sql`.
pub(crate) fn state_count(row: &Row<'_>) -> StoreResult<(JobState, i64)> {
    Ok((get::<String>(row, "state")?.parse()?, get(row, "n")?))
}

/// A row of `job/heartbeat.sql`.
pub(crate) fn renewal(row: &Row<'_>) -> StoreResult<LeaseRenewal> {
    Ok(LeaseRenewal {
        job_id: get(row, "id")?,
        fence: get(row, "fence")?,
        lease_expires_at: ts(row, "lease_expires_at")?,
    })
}

/// An `idem_job_attempt` row.
pub(crate) fn attempt(row: &Row<'_>) -> StoreResult<AttemptRow> {
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

/// A row of `job_attempt/first_started.sql`.
pub(crate) fn first_started(row: &Row<'_>) -> StoreResult<(i64, Timestamp)> {
    Ok((get(row, "job_id")?, ts(row, "started_at")?))
}

/// A row of `queue/waiting.sql`.
pub(crate) fn queue_waiting(row: &Row<'_>) -> StoreResult<QueueWaiting> {
    Ok(QueueWaiting {
        queue: get(row, "queue")?,
        kind: get(row, "kind")?,
        count: get(row, "count")?,
        oldest_run_at: ts(row, "oldest_run_at")?,
    })
}

/// A row of `queue/finished.sql`.
pub(crate) fn queue_finished(row: &Row<'_>) -> StoreResult<QueueFinished> {
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
pub(crate) fn paused_queue(row: &Row<'_>) -> StoreResult<idem_store::PausedQueue> {
    Ok(idem_store::PausedQueue {
        queue: get(row, "queue")?,
        paused_at: ts(row, "paused_at")?,
        paused_by: get(row, "paused_by")?,
    })
}

pub(crate) fn queue_count(row: &Row<'_>) -> StoreResult<QueueCount> {
    Ok(QueueCount {
        queue: get(row, "queue")?,
        state: get::<String>(row, "state")?.parse()?,
        count: get(row, "count")?,
    })
}
