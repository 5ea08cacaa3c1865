//! Enqueue keys (`queries/enqueue_key/`): the building blocks of
//! `idem_store::enqueue`, which takes a batch's keys after inserting its jobs and looks
//! up the holders of the keys it did not get.
//!
//! PostgreSQL dialect: a deleted job's key goes in the statement that deletes the job
//! (`job/discard.sql`, `purge/jobs.sql`), so there is no `delete` here (SQLite has one).

use idem_store::{EnqueueKeyTake, StoreResult};
use sqlx::{Executor, Postgres, Row};

use super::first_ids;
use crate::error::interpret_error;

pub(crate) async fn take<'e, E>(ex: E, p: EnqueueKeyTake) -> StoreResult<Vec<i64>>
where
    E: Executor<'e, Database = Postgres>,
{
    let keys: Vec<serde_json::Value> = p
        .keys
        .iter()
        .map(|(queue, key, job_id)| serde_json::json!({"queue": queue, "key": key, "job_id": job_id}))
        .collect();
    let rows = sqlx::query(include_str!("../../queries/enqueue_key/take.sql"))
        .bind(serde_json::Value::Array(keys))
        .bind(p.window_ms)
        .bind(p.now)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    first_ids(&rows)
}

pub(crate) async fn find<'e, E>(
    ex: E,
    keys: Vec<(String, String)>,
) -> StoreResult<Vec<(String, String, i64)>>
where
    E: Executor<'e, Database = Postgres>,
{
    let keys: Vec<serde_json::Value> = keys
        .iter()
        .map(|(queue, key)| serde_json::json!({"queue": queue, "key": key}))
        .collect();
    let rows = sqlx::query(include_str!("../../queries/enqueue_key/find.sql"))
        .bind(serde_json::Value::Array(keys))
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get(0).map_err(interpret_error)?,
                r.try_get(1).map_err(interpret_error)?,
                r.try_get(2).map_err(interpret_error)?,
            ))
        })
        .collect()
}
