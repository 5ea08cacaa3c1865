//! Operators' actions on jobs that may be running (cancel, dead-letter retry, discard),
//! each in a transaction of its own whose lock waits end after
//! [`crate::PgOptions::operator_lock_timeout`] (`SET LOCAL lock_timeout`).
//!
//! A cancel waits for a job's row when a worker's effect transaction holds it
//! (`job/lock.sql`), so that it sees the outcome instead of racing it. Should the holder
//! stall (a paused process), the wait must not hang the operator: the action gives up
//! with a `Busy` error that says what holds the job and when it will be released (the
//! stalled holder loses its session after its idle timeout, the worker's lease).
//! PostgreSQL only: SQLite's writer waits at most its busy timeout anyway.

use std::time::Duration;

use idem_store::{JobCancel, JobDiscard, JobRetry, JobRow, StoreError, StoreResult};
use sqlx::{PgPool, Postgres, Transaction};

use crate::connect::BEGIN;
use crate::error::interpret_error;
use crate::ops;

/// A transaction whose lock waits end after `timeout`.
async fn begin(pool: &PgPool, timeout: Duration) -> StoreResult<Transaction<'static, Postgres>> {
    let mut tx = pool.begin_with(BEGIN).await.map_err(interpret_error)?;
    let ms = crate::connect::millis_text(timeout);
    sqlx::query("SELECT set_config('lock_timeout', $1, true)")
        .bind(ms)
        .execute(&mut *tx)
        .await
        .map_err(interpret_error)?;
    Ok(tx)
}

/// `Busy` errors of an operator's action say what held the rows it waited for.
fn explain(e: StoreError, what: &str, timeout: Duration) -> StoreError {
    match e {
        StoreError::Busy(msg) => StoreError::Busy(format!(
            "{what} stayed locked for {timeout:?}: a worker's open effect transaction holds \
             it (a paused worker loses its session once its lease has passed, and the job \
             is then rescued); try again ({msg})"
        )),
        other => other,
    }
}

pub(crate) async fn cancel(pool: &PgPool, t: Duration, p: JobCancel) -> StoreResult<JobRow> {
    let what = format!("job {}", p.job_id);
    let mut tx = begin(pool, t).await?;
    let row = ops::job::cancel(&mut tx, p)
        .await
        .map_err(|e| explain(e, &what, t))?;
    tx.commit().await.map_err(interpret_error)?;
    Ok(row)
}

pub(crate) async fn retry(pool: &PgPool, t: Duration, p: JobRetry) -> StoreResult<Vec<JobRow>> {
    let what = format!("one of jobs {:?}", p.ids);
    let mut tx = begin(pool, t).await?;
    let rows = ops::job::retry(&mut *tx, p)
        .await
        .map_err(|e| explain(e, &what, t))?;
    tx.commit().await.map_err(interpret_error)?;
    Ok(rows)
}

pub(crate) async fn discard(pool: &PgPool, t: Duration, p: JobDiscard) -> StoreResult<Vec<i64>> {
    let what = format!("one of jobs {:?}", p.ids);
    let mut tx = begin(pool, t).await?;
    let ids = ops::job::discard(&mut *tx, p)
        .await
        .map_err(|e| explain(e, &what, t))?;
    tx.commit().await.map_err(interpret_error)?;
    Ok(ids)
}
