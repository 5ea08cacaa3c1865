//! The attempt history (`queries/job_attempt/`): listed per job, its earliest start per
//! job, and the attempt a cancel records for a running job.
//!
//! PostgreSQL dialect: complete, complete-many, fail and rescue write their attempt rows
//! in their own statement (data-modifying CTEs), and discard and purge delete them there;
//! only cancel writes one here (SQLite writes them all from this module).

use idem_store::{AttemptOutcome, AttemptRow, JobCancel, StoreResult, Timestamp};
use sqlx::{Executor, Postgres};

use crate::error::interpret_error;
use crate::row;

pub(crate) async fn list<'e, E>(ex: E, job_id: i64) -> StoreResult<Vec<AttemptRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/job_attempt/list.sql"))
        .bind(job_id)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    rows.iter().map(row::attempt).collect()
}

/// When the first recorded attempt of each of `ids` started.
pub(crate) async fn first_started<'e, E>(ex: E, ids: &[i64]) -> StoreResult<Vec<(i64, Timestamp)>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/job_attempt/first_started.sql"))
        .bind(ids)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    rows.iter().map(row::first_started).collect()
}

/// The `cancelled` attempt of job `p.job_id` if it is running; nothing otherwise.
pub(super) async fn insert_cancelled<'e, E>(ex: E, p: &JobCancel) -> StoreResult<()>
where
    E: Executor<'e, Database = Postgres>,
{
    sqlx::query(include_str!("../../queries/job_attempt/insert.sql"))
        .bind(p.job_id)
        .bind(AttemptOutcome::Cancelled.as_str())
        .bind("cancelled by an operator while running")
        .bind(p.now)
        .bind("running")
        .execute(ex)
        .await
        .map_err(interpret_error)?;
    Ok(())
}
