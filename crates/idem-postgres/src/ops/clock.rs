//! The database clock (`queries/clock/`).

use idem_store::{StoreResult, Timestamp};
use sqlx::{Executor, Postgres};

use crate::error::interpret_error;

/// The database clock.
pub(crate) async fn now<'e, E>(ex: E) -> StoreResult<Timestamp>
where
    E: Executor<'e, Database = Postgres>,
{
    sqlx::query_scalar(include_str!("../../queries/clock/now.sql"))
        .fetch_one(ex)
        .await
        .map_err(interpret_error)
}
