//! The operations that are one statement each: insert, claim, heartbeat, complete,
//! complete-many, fail and rescue (each writes its attempt rows in the same statement). Each runs on any executor: inside a caller's transaction ([`crate::PgTx`])
//! or straight on the pool, where the statement is its own transaction and costs one
//! round trip instead of three (`BEGIN`, the statement, `COMMIT`). These are the hot
//! path's statements.

use idem_store::{
    JobClaim, JobComplete, JobCompleteMany, JobFail, JobHeartbeat, JobInsert, JobRescue, JobRow,
    LeaseRenewal, LeaseToken, StoreError, StoreResult,
};
use sqlx::postgres::PgArguments;
use sqlx::postgres::PgRow;
use sqlx::{Executor, Postgres};

type Query = sqlx::query::Query<'static, Postgres, PgArguments>;

use crate::error::interpret_error;
use crate::row;

/// One job by id.
pub(crate) async fn job_get<'e, E>(ex: E, id: i64) -> StoreResult<Option<JobRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let row = sqlx::query(include_str!("../queries/job/get.sql"))
        .bind(id)
        .fetch_optional(ex)
        .await
        .map_err(interpret_error)?;
    row.as_ref().map(row::job).transpose()
}

/// Leases as the two arrays (job ids, fences) the batch statements unnest: bound in the
/// binary protocol, no JSON to print and parse on the hot path.
fn lease_columns(leases: &[LeaseToken]) -> (Vec<i64>, Vec<i64>) {
    leases.iter().map(|l| (l.job_id, l.fence)).unzip()
}

pub(crate) async fn job_insert<'e, E>(ex: E, p: JobInsert) -> StoreResult<Vec<JobRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    if p.jobs.is_empty() {
        return Ok(Vec::new());
    }
    // One array per column, bound in the binary protocol: cheaper for the server than
    // unpacking one JSON document (bulk enqueue, 200,000 jobs, three runs each: 79k-102k
    // jobs/s against 74k-100k).
    let jobs = &p.jobs;
    let rows = sqlx::query(include_str!("../queries/job/insert.sql"))
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
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    let inserted = rows.iter().map(row::inserted).collect::<StoreResult<_>>()?;
    p.rows(inserted)
}

/// The job a guarded statement returned, or `LeaseLost` when it returned none.
async fn guarded<'e, E>(ex: E, q: Query, lease: LeaseToken) -> StoreResult<JobRow>
where
    E: Executor<'e, Database = Postgres>,
{
    match q.fetch_optional(ex).await.map_err(interpret_error)? {
        Some(r) => row::job(&r),
        None => Err(StoreError::lease_lost(lease)),
    }
}

/// Completes a job under its fence and records the attempt, in one statement.
pub(crate) async fn job_complete<'e, E>(ex: E, p: JobComplete) -> StoreResult<JobRow>
where
    E: Executor<'e, Database = Postgres>,
{
    let q = sqlx::query(include_str!("../queries/job/complete.sql"))
        .bind(p.lease.job_id)
        .bind(p.lease.fence)
        .bind(p.now);
    guarded(ex, q, p.lease).await
}

/// Records a failed (or snoozed) attempt under the fence, in one statement.
pub(crate) async fn job_fail<'e, E>(ex: E, p: JobFail) -> StoreResult<JobRow>
where
    E: Executor<'e, Database = Postgres>,
{
    let lease = p.lease;
    let q = sqlx::query(include_str!("../queries/job/fail.sql"))
        .bind(lease.job_id)
        .bind(lease.fence)
        .bind(p.retry_in_ms)
        .bind(p.error)
        .bind(p.now)
        .bind(p.snooze);
    guarded(ex, q, lease).await
}

/// Moves expired leases back and records each lost attempt, in one statement.
pub(crate) async fn job_rescue<'e, E>(ex: E, p: JobRescue) -> StoreResult<Vec<JobRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../queries/job/rescue.sql"))
        .bind(i64::from(p.limit))
        .bind(p.retry_in_ms)
        .bind(p.now)
        .bind(p.max_attempts)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    row::sorted_jobs(rows)
}

pub(crate) async fn job_claim<'e, E>(ex: E, p: JobClaim) -> StoreResult<Vec<JobRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../queries/job/claim.sql"))
        .bind(p.queue)
        .bind(i64::from(p.limit))
        .bind(p.worker)
        .bind(p.lease_ms)
        .bind(p.now)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    row::sorted_jobs(rows)
}

pub(crate) async fn job_heartbeat<'e, E>(ex: E, p: JobHeartbeat) -> StoreResult<Vec<LeaseRenewal>>
where
    E: Executor<'e, Database = Postgres>,
{
    if p.leases.is_empty() {
        return Ok(Vec::new());
    }
    let (ids, fences) = lease_columns(&p.leases);
    let rows = sqlx::query(include_str!("../queries/job/heartbeat.sql"))
        .bind(ids)
        .bind(fences)
        .bind(p.lease_ms)
        .bind(p.now)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    rows.iter().map(renewal).collect()
}

fn renewal(r: &PgRow) -> StoreResult<LeaseRenewal> {
    Ok(LeaseRenewal {
        job_id: row::get(r, "id")?,
        fence: row::get(r, "fence")?,
        lease_expires_at: row::get(r, "lease_expires_at")?,
    })
}

pub(crate) async fn job_complete_many<'e, E>(ex: E, p: JobCompleteMany) -> StoreResult<Vec<i64>>
where
    E: Executor<'e, Database = Postgres>,
{
    if p.leases.is_empty() {
        return Ok(Vec::new());
    }
    let (ids, fences) = lease_columns(&p.leases);
    sqlx::query_scalar(include_str!("../queries/job/complete_many.sql"))
        .bind(ids)
        .bind(fences)
        .bind(p.now)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)
}
