//! Per-queue counts of jobs by state, of waiting jobs by kind and of jobs finished in a
//! time range, and pausing queues (`queries/queue/`).

use idem_store::{
    PausedQueue, QueueCount, QueueFinished, QueueFinishedList, QueuePause, QueueWaiting,
    StoreResult,
};
use sqlx::{Executor, Postgres};

use crate::error::interpret_error;
use crate::row;

pub(crate) async fn counts<'e, E>(ex: E) -> StoreResult<Vec<QueueCount>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/queue/counts.sql"))
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    rows.iter().map(row::queue_count).collect()
}

pub(crate) async fn waiting<'e, E>(ex: E) -> StoreResult<Vec<QueueWaiting>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/queue/waiting.sql"))
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    rows.iter().map(row::queue_waiting).collect()
}

/// Per queue, the jobs finalized (completed or dead) in `[since, until)`.
pub(crate) async fn finished<'e, E>(ex: E, p: QueueFinishedList) -> StoreResult<Vec<QueueFinished>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/queue/finished.sql"))
        .bind(p.since)
        .bind(p.until)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    rows.iter().map(row::queue_finished).collect()
}

pub(crate) async fn paused<'e, E>(ex: E) -> StoreResult<Vec<PausedQueue>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/queue/paused.sql"))
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    rows.iter().map(row::paused_queue).collect()
}

pub(crate) async fn pause<'e, E>(ex: E, p: QueuePause) -> StoreResult<bool>
where
    E: Executor<'e, Database = Postgres>,
{
    let row = sqlx::query(include_str!("../../queries/queue/pause.sql"))
        .bind(p.queue)
        .bind(p.now)
        .bind(p.by)
        .fetch_optional(ex)
        .await
        .map_err(interpret_error)?;
    Ok(row.is_some())
}

pub(crate) async fn resume<'e, E>(ex: E, queue: String) -> StoreResult<bool>
where
    E: Executor<'e, Database = Postgres>,
{
    let row = sqlx::query(include_str!("../../queries/queue/resume.sql"))
        .bind(queue)
        .fetch_optional(ex)
        .await
        .map_err(interpret_error)?;
    Ok(row.is_some())
}
