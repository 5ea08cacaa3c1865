//! Operators' actions on jobs that may be running (cancel, dead-letter retry, discard),
//! each the [`StoreTx`] method (which counts a batch's children too) in a transaction of
//! its own whose lock waits end after
//! [`crate::PgOptions::operator_lock_timeout`] (`SET LOCAL lock_timeout`).
//!
//! A cancel waits for a job's row when a worker's effect transaction holds it
//! (`job/lock.sql`), so that it sees the outcome instead of racing it. Should the holder
//! stall (a paused process), the wait must not hang the operator: the action gives up
//! with a `Busy` error that says what holds the job and when it will be released (the
//! stalled holder loses its session after its idle timeout, the worker's lease).
//! PostgreSQL only: SQLite's writer waits at most its busy timeout anyway.

use std::time::Duration;

use idem_store::{JobCancel, JobDiscard, JobRetry, JobRow, StoreError, StoreResult, StoreTx};

use crate::PgTx;
use crate::pooler::Pool;

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

/// Runs `op` in a transaction whose lock waits end after `t`, and commits it; a `Busy`
/// error names `what` was locked.
async fn run<R, F>(pool: &Pool, t: Duration, what: String, op: F) -> StoreResult<R>
where
    F: for<'a> FnOnce(
        &'a mut PgTx,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = StoreResult<R>> + Send + 'a>,
    >,
{
    let mut tx = PgTx::begin_with_lock_timeout(pool, t).await?;
    let out = op(&mut tx).await.map_err(|e| explain(e, &what, t))?;
    Box::new(tx).commit().await?;
    Ok(out)
}

pub(crate) async fn cancel(pool: &Pool, t: Duration, p: JobCancel) -> StoreResult<JobRow> {
    let what = format!("job {}", p.job_id);
    run(pool, t, what, |tx| Box::pin(tx.job_cancel(p))).await
}

pub(crate) async fn retry(pool: &Pool, t: Duration, p: JobRetry) -> StoreResult<Vec<JobRow>> {
    let what = format!("one of jobs {:?}", p.ids);
    run(pool, t, what, |tx| Box::pin(tx.job_retry(p))).await
}

pub(crate) async fn discard(pool: &Pool, t: Duration, p: JobDiscard) -> StoreResult<Vec<i64>> {
    let what = format!("one of jobs {:?}", p.ids);
    run(pool, t, what, |tx| Box::pin(tx.job_discard(p))).await
}
