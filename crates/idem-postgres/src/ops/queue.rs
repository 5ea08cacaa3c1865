//! Per-queue counts of jobs by state, of waiting jobs by kind, and of jobs finished in a
//! time range (`queries/queue/`).

use idem_store::{QueueCount, QueueFinished, QueueFinishedList, QueueWaiting, StoreResult};
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
