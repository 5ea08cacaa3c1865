//! Decoding SQLite rows into the seam's records. Timestamps are INTEGER milliseconds.

use chrono::TimeZone;
use idem_store::{
    AttemptRow, BatchRow, Completed, EffectRecord, HttpKeyRow, IntentRow, JobRow, JobState,
    LeaseRenewal, LedgerEntry, LedgerMismatch, QueueCount, QueueFinished, QueueWaiting, StoreError,
    StoreResult, Timestamp,
};
use rusqlite::types::FromSql;
use rusqlite::{Row, RowIndex, Statement};

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

fn get<T: FromSql>(row: &Row<'_>, col: impl RowIndex) -> StoreResult<T> {
    row.get(col).map_err(interpret_error)
}

fn ts(row: &Row<'_>, col: impl RowIndex) -> StoreResult<Timestamp> {
    ms_to_ts(get(row, col)?)
}

fn opt_ts(row: &Row<'_>, col: impl RowIndex) -> StoreResult<Option<Timestamp>> {
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

/// Intents of one state (`state`, `count`).
pub(crate) fn intent_count(row: &Row<'_>) -> StoreResult<idem_store::IntentCount> {
    Ok(idem_store::IntentCount {
        state: get::<String>(row, "state")?.parse()?,
        count: get(row, "count")?,
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

/// Where each column of an `idem_job` row is in a statement's result: looked up by name
/// once per statement, then read by position (a lookup by name compares every column's
/// name, which cost a sixth of a drain's writer time).
pub(crate) struct JobColumns {
    args: usize,
    id: usize,
    kind: usize,
    queue: usize,
    priority: usize,
    state: usize,
    attempt: usize,
    max_attempts: usize,
    run_at: usize,
    fence: usize,
    lease_owner: usize,
    lease_expires_at: usize,
    batch_id: usize,
    created_at: usize,
    attempted_at: usize,
    finalized_at: usize,
    last_error: usize,
    snoozes: usize,
    enqueue_key: usize,
    principal: usize,
    follows_job_id: usize,
    follows_batch_id: usize,
    trace_parent: usize,
    result: usize,
}

impl JobColumns {
    /// The positions of the job columns in `stmt`'s result, in one pass over its columns.
    pub(crate) fn of(stmt: &Statement<'_>) -> StoreResult<JobColumns> {
        const MISSING: usize = usize::MAX;
        let mut c = JobColumns {
            args: MISSING,
            id: MISSING,
            kind: MISSING,
            queue: MISSING,
            priority: MISSING,
            state: MISSING,
            attempt: MISSING,
            max_attempts: MISSING,
            run_at: MISSING,
            fence: MISSING,
            lease_owner: MISSING,
            lease_expires_at: MISSING,
            batch_id: MISSING,
            created_at: MISSING,
            attempted_at: MISSING,
            finalized_at: MISSING,
            last_error: MISSING,
            snoozes: MISSING,
            enqueue_key: MISSING,
            principal: MISSING,
            follows_job_id: MISSING,
            follows_batch_id: MISSING,
            trace_parent: MISSING,
            result: MISSING,
        };
        for (i, name) in stmt.column_names().into_iter().enumerate() {
            let slot = match name {
                "args" => &mut c.args,
                "id" => &mut c.id,
                "kind" => &mut c.kind,
                "queue" => &mut c.queue,
                "priority" => &mut c.priority,
                "state" => &mut c.state,
                "attempt" => &mut c.attempt,
                "max_attempts" => &mut c.max_attempts,
                "run_at" => &mut c.run_at,
                "fence" => &mut c.fence,
                "lease_owner" => &mut c.lease_owner,
                "lease_expires_at" => &mut c.lease_expires_at,
                "batch_id" => &mut c.batch_id,
                "created_at" => &mut c.created_at,
                "attempted_at" => &mut c.attempted_at,
                "finalized_at" => &mut c.finalized_at,
                "last_error" => &mut c.last_error,
                "snoozes" => &mut c.snoozes,
                "enqueue_key" => &mut c.enqueue_key,
                "principal" => &mut c.principal,
                "follows_job_id" => &mut c.follows_job_id,
                "follows_batch_id" => &mut c.follows_batch_id,
                "trace_parent" => &mut c.trace_parent,
                "result" => &mut c.result,
                _ => continue,
            };
            *slot = i;
        }
        let found = [
            c.args,
            c.id,
            c.kind,
            c.queue,
            c.priority,
            c.state,
            c.attempt,
            c.max_attempts,
            c.run_at,
            c.fence,
            c.lease_owner,
            c.lease_expires_at,
            c.batch_id,
            c.created_at,
            c.attempted_at,
            c.finalized_at,
            c.last_error,
            c.snoozes,
            c.enqueue_key,
            c.principal,
            c.follows_job_id,
            c.follows_batch_id,
            c.trace_parent,
            c.result,
        ];
        if found.contains(&MISSING) {
            return Err(StoreError::Database(format!(
                "a statement returning jobs lacks a job column (it returns {:?})",
                stmt.column_names()
            )));
        }
        Ok(c)
    }

    /// The job in `row`, a row of the statement these positions were taken from.
    pub(crate) fn job(&self, row: &Row<'_>) -> StoreResult<JobRow> {
        let args: String = get(row, self.args)?;
        Ok(JobRow {
            id: get(row, self.id)?,
            kind: get(row, self.kind)?,
            queue: get(row, self.queue)?,
            args: serde_json::from_str(&args)
                .map_err(|e| StoreError::Database(format!("stored args are not JSON: {e}")))?,
            priority: get(row, self.priority)?,
            state: get::<String>(row, self.state)?.parse()?,
            attempt: get(row, self.attempt)?,
            max_attempts: get(row, self.max_attempts)?,
            run_at: ts(row, self.run_at)?,
            fence: get(row, self.fence)?,
            lease_owner: get(row, self.lease_owner)?,
            lease_expires_at: opt_ts(row, self.lease_expires_at)?,
            batch_id: get(row, self.batch_id)?,
            created_at: ts(row, self.created_at)?,
            attempted_at: opt_ts(row, self.attempted_at)?,
            finalized_at: opt_ts(row, self.finalized_at)?,
            last_error: get(row, self.last_error)?,
            snoozes: get(row, self.snoozes)?,
            enqueue_key: get(row, self.enqueue_key)?,
            principal: get(row, self.principal)?,
            follows_job: get(row, self.follows_job_id)?,
            follows_batch: get(row, self.follows_batch_id)?,
            trace_parent: get(row, self.trace_parent)?,
            result: get::<Option<String>>(row, self.result)?
                .map(|r| json(&r, "result"))
                .transpose()?,
        })
    }
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
/// A leadership row: name, holder, fence, elected_at, expires_at.
pub(crate) type LeaderRow = (String, String, i64, Timestamp, Timestamp);

/// A row of `leader/elect.sql`, `current.sql` or `renew.sql`.
pub(crate) fn leader(row: &Row<'_>) -> StoreResult<LeaderRow> {
    Ok((
        get(row, "name")?,
        get(row, "holder")?,
        get(row, "fence")?,
        ts(row, "elected_at")?,
        ts(row, "expires_at")?,
    ))
}

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
