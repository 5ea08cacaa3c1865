//! The job operations (`queries/job/`): insert, claim, heartbeat, lock, the fenced
//! finishes (complete, complete-many, fail), rescue, cancel, the dead-letter retry and
//! discard, and reads by id or filter.
//!
//! All but cancel are one statement each and run on any executor: inside a caller's
//! transaction ([`crate::PgTx`]) or straight on the pool, where the statement is its own
//! transaction and costs one round trip instead of three (`BEGIN`, the statement,
//! `COMMIT`). Insert, claim, heartbeat, complete, complete-many, fail and rescue are the
//! hot path's statements. Complete, complete-many, fail and rescue write their attempt
//! rows in the same statement (data-modifying CTEs), and discard deletes the jobs'
//! attempt history and enqueue keys in its statement; insert, claim and heartbeat write
//! no attempt row.

use idem_store::{
    Completed, JobCancel, JobClaim, JobComplete, JobCompleteMany, JobDiscard, JobFail,
    JobHeartbeat, JobInsert, JobList, JobLock, JobPutBack, JobRescue, JobRetry, JobRow, JobState,
    LeaseRenewal, LeaseToken, StoreError, StoreResult,
};
use sqlx::{Executor, PgConnection, Postgres};

use super::{first_ids, guarded, job_attempt};
use crate::error::interpret_error;
use crate::row;

/// One job by id.
pub(crate) async fn get<'e, E>(ex: E, id: i64) -> StoreResult<Option<JobRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let row = sqlx::query(include_str!("../../queries/job/get.sql"))
        .bind(id)
        .fetch_optional(ex)
        .await
        .map_err(interpret_error)?;
    row.as_ref().map(row::job).transpose()
}

/// The oldest job that awaited intent `key`.
pub(crate) async fn awaiting<'e, E>(ex: E, key: String) -> StoreResult<Option<JobRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let row = sqlx::query(include_str!("../../queries/job/awaiting.sql"))
        .bind(key)
        .fetch_optional(ex)
        .await
        .map_err(interpret_error)?;
    row.as_ref().map(row::job).transpose()
}

pub(crate) async fn list<'e, E>(ex: E, p: JobList) -> StoreResult<Vec<JobRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/job/list.sql"))
        .bind(p.state.map(|s| s.as_str()))
        .bind(p.queue)
        .bind(p.kind)
        .bind(p.before_id)
        .bind(i64::from(p.limit))
        .bind(p.principal)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    row::jobs(&rows)
}

/// Leases as the two arrays (job ids, fences) the batch statements unnest: bound in the
/// binary protocol, no JSON to print and parse on the hot path.
fn lease_columns(leases: &[LeaseToken]) -> (Vec<i64>, Vec<i64>) {
    leases.iter().map(|l| (l.job_id, l.fence)).unzip()
}

pub(crate) async fn insert<'e, E>(ex: E, p: JobInsert) -> StoreResult<Vec<JobRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    if p.jobs.is_empty() {
        return Ok(Vec::new());
    }
    // One array per column in the binary protocol: cheaper for the server to unpack than
    // one JSON document (measured in docs/performance.md).
    let jobs = &p.jobs;
    let rows = sqlx::query(include_str!("../../queries/job/insert.sql"))
        .bind(jobs.iter().map(|j| j.kind.as_str()).collect::<Vec<_>>())
        .bind(jobs.iter().map(|j| j.queue.as_str()).collect::<Vec<_>>())
        .bind(jobs.iter().map(|j| &j.args).collect::<Vec<_>>())
        .bind(jobs.iter().map(|j| j.priority).collect::<Vec<_>>())
        .bind(jobs.iter().map(|j| j.run_at).collect::<Vec<_>>())
        .bind(jobs.iter().map(|j| j.max_attempts).collect::<Vec<_>>())
        .bind(
            jobs.iter()
                .map(|j| j.claim.as_ref().map(|c| c.worker.as_str()))
                .collect::<Vec<_>>(),
        )
        .bind(
            jobs.iter()
                .map(|j| j.claim.as_ref().map(|c| c.lease_ms))
                .collect::<Vec<_>>(),
        )
        .bind(p.now)
        .bind(
            jobs.iter()
                .map(|j| j.enqueue_key.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(
            jobs.iter()
                .map(|j| j.principal.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(jobs.iter().map(|j| j.batch_id).collect::<Vec<_>>())
        .bind(jobs.iter().map(|j| j.follows_job).collect::<Vec<_>>())
        .bind(jobs.iter().map(|j| j.follows_batch).collect::<Vec<_>>())
        .bind(
            jobs.iter()
                .map(|j| j.trace_parent.clone())
                .collect::<Vec<_>>(),
        )
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    let inserted = rows.iter().map(row::inserted).collect::<StoreResult<_>>()?;
    p.rows(inserted)
}

pub(crate) async fn claim<'e, E>(ex: E, p: JobClaim) -> StoreResult<Vec<JobRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/job/claim.sql"))
        .bind(p.queue)
        .bind(i64::from(p.limit))
        .bind(p.worker)
        .bind(p.lease_ms)
        .bind(p.now)
        .bind(p.kinds)
        .bind(p.principal)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    row::sorted_jobs(rows)
}

pub(crate) async fn unclaim_paused<'e, E>(ex: E, leases: Vec<LeaseToken>) -> StoreResult<Vec<i64>>
where
    E: Executor<'e, Database = Postgres>,
{
    if leases.is_empty() {
        return Ok(Vec::new());
    }
    let (ids, fences) = lease_columns(&leases);
    let rows = sqlx::query(include_str!("../../queries/job/unclaim_paused.sql"))
        .bind(ids)
        .bind(fences)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    rows.iter().map(|r| row::get(r, "id")).collect()
}

pub(crate) async fn heartbeat<'e, E>(ex: E, p: JobHeartbeat) -> StoreResult<Vec<LeaseRenewal>>
where
    E: Executor<'e, Database = Postgres>,
{
    if p.leases.is_empty() {
        return Ok(Vec::new());
    }
    let (ids, fences) = lease_columns(&p.leases);
    let rows = sqlx::query(include_str!("../../queries/job/heartbeat.sql"))
        .bind(ids)
        .bind(fences)
        .bind(p.lease_ms)
        .bind(p.now)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    rows.iter().map(row::renewal).collect()
}

pub(crate) async fn lock<'e, E>(ex: E, p: JobLock) -> StoreResult<JobRow>
where
    E: Executor<'e, Database = Postgres>,
{
    let sql = include_str!("../../queries/job/lock.sql");
    #[cfg(feature = "chaos-break-fence")]
    let sql = crate::chaos::unfenced(sql);
    let q = sqlx::query(sql)
        .bind(p.lease.job_id)
        .bind(p.lease.fence)
        .bind(p.idle_timeout_ms);
    guarded(ex, q, p.lease, row::job).await
}

/// Completes a job under its fence and records the attempt, in one statement.
/// `batches: false` leaves a child of a batch alone (`LeaseLost`), for a path that does
/// not count batches.
pub(crate) async fn complete<'e, E>(ex: E, p: JobComplete, batches: bool) -> StoreResult<JobRow>
where
    E: Executor<'e, Database = Postgres>,
{
    let sql = include_str!("../../queries/job/complete.sql");
    #[cfg(feature = "chaos-break-fence")]
    let sql = crate::chaos::unfenced(sql);
    let q = sqlx::query(sql)
        .bind(p.lease.job_id)
        .bind(p.lease.fence)
        .bind(p.now)
        .bind(p.result)
        .bind(batches);
    guarded(ex, q, p.lease, row::job).await
}

/// Completes many jobs, each under its fence, in one statement; `batches` as for
/// [`complete`].
pub(crate) async fn complete_many<'e, E>(
    ex: E,
    p: JobCompleteMany,
    batches: bool,
) -> StoreResult<Vec<Completed>>
where
    E: Executor<'e, Database = Postgres>,
{
    if p.leases.is_empty() {
        return Ok(Vec::new());
    }
    let (ids, fences) = lease_columns(&p.leases);
    let (result_ids, results): (Vec<i64>, Vec<serde_json::Value>) = p.results.into_iter().unzip();
    let sql = include_str!("../../queries/job/complete_many.sql");
    #[cfg(feature = "chaos-break-fence")]
    let sql = crate::chaos::unfenced(sql);
    let rows = sqlx::query(sql)
        .bind(ids)
        .bind(fences)
        .bind(p.now)
        .bind(result_ids)
        .bind(results)
        .bind(batches)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    rows.iter().map(row::completed).collect()
}

/// Records a failed (or snoozed) attempt under the fence, in one statement; `batches` as
/// for [`complete`].
pub(crate) async fn fail<'e, E>(ex: E, p: JobFail, batches: bool) -> StoreResult<JobRow>
where
    E: Executor<'e, Database = Postgres>,
{
    let lease = p.lease;
    let q = sqlx::query(include_str!("../../queries/job/fail.sql"))
        .bind(lease.job_id)
        .bind(lease.fence)
        .bind(p.retry_in_ms)
        .bind(p.error)
        .bind(p.now)
        .bind(p.snooze)
        .bind(batches);
    guarded(ex, q, lease, row::job).await
}

/// Moves expired leases back and records each lost attempt, in one statement.
pub(crate) async fn rescue<'e, E>(ex: E, p: JobRescue) -> StoreResult<Vec<JobRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/job/rescue.sql"))
        .bind(i64::from(p.limit))
        .bind(p.retry_in_ms)
        .bind(p.now)
        .bind(p.max_attempts)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    row::sorted_jobs(rows)
}

/// Cancels an unfinished job; a running one gets its `cancelled` attempt first.
pub(crate) async fn cancel(c: &mut PgConnection, p: JobCancel) -> StoreResult<JobRow> {
    // The attempt of a running job first: the statement locks the row, so a cancel
    // waits for a concurrent claim, completion or failure and sees its outcome.
    job_attempt::insert_cancelled(&mut *c, &p).await?;
    let row = sqlx::query(include_str!("../../queries/job/cancel.sql"))
        .bind(p.job_id)
        .bind(p.now)
        .fetch_optional(&mut *c)
        .await
        .map_err(interpret_error)?;
    match row {
        Some(r) => row::job(&r),
        None => Err(cancel_refusal(c, p.job_id).await),
    }
}

/// Why a cancel changed nothing: the job is missing or already finished.
async fn cancel_refusal(c: &mut PgConnection, job_id: i64) -> StoreError {
    match get(c, job_id).await {
        Ok(found) => StoreError::cancel_refused(job_id, found.as_ref()),
        Err(e) => e,
    }
}

pub(crate) async fn delete<'e, E>(ex: E, ids: Vec<i64>) -> StoreResult<u64>
where
    E: Executor<'e, Database = Postgres>,
{
    let done = sqlx::query(include_str!("../../queries/job/delete.sql"))
        .bind(ids)
        .execute(ex)
        .await
        .map_err(interpret_error)?;
    Ok(done.rows_affected())
}

pub(crate) async fn get_many<'e, E>(ex: E, ids: Vec<i64>) -> StoreResult<Vec<JobRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/job/get_many.sql"))
        .bind(ids)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    row::jobs(&rows)
}

/// Puts dead or cancelled jobs back to available; each with the state it left.
pub(crate) async fn retry<'e, E>(ex: E, p: JobRetry) -> StoreResult<Vec<(JobRow, JobState)>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/job/retry.sql"))
        .bind(p.ids)
        .bind(p.now)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    let mut retried = rows
        .iter()
        .map(|r| Ok((row::job(r)?, row::get::<String>(r, "was")?.parse()?)))
        .collect::<StoreResult<Vec<(JobRow, JobState)>>>()?;
    retried.sort_by_key(|(j, _)| j.id);
    Ok(retried)
}

/// Marks dead job `job_id` as awaiting intent `key`; whether it was dead.
pub(crate) async fn await_intent<'e, E>(ex: E, job_id: i64, key: String) -> StoreResult<bool>
where
    E: Executor<'e, Database = Postgres>,
{
    let done = sqlx::query(include_str!("../../queries/job/await_intent.sql"))
        .bind(job_id)
        .bind(key)
        .execute(ex)
        .await
        .map_err(interpret_error)?;
    Ok(done.rows_affected() > 0)
}

/// Puts every dead job awaiting intent `p.key` back to available, in id order.
pub(crate) async fn put_back<'e, E>(ex: E, p: JobPutBack) -> StoreResult<Vec<JobRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/job/put_back.sql"))
        .bind(p.key)
        .bind(p.now)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    let mut jobs = row::jobs(&rows)?;
    jobs.sort_by_key(|j| j.id);
    Ok(jobs)
}

pub(crate) async fn discard<'e, E>(ex: E, p: JobDiscard) -> StoreResult<Vec<i64>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/job/discard.sql"))
        .bind(p.ids)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    first_ids(&rows)
}
