//! Per-queue counts of jobs by state, and of waiting jobs by kind (`queries/queue/`).

use idem_store::{QueueCount, QueueWaiting, StoreResult};
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
