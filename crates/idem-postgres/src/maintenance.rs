//! Operator and maintenance operations, one statement each, on any executor: dead-letter
//! retry and discard, purges and their counts, and the statements of an enqueue with keys.

use idem_store::{
    EnqueueKeyTake, JobDiscard, JobRetry, JobRow, Purge, PurgeTarget, StoreResult, Timestamp,
};
use sqlx::{Executor, Postgres, Row};

use crate::error::interpret_error;
use crate::row;

/// The job states a purge of `target` deletes.
fn purged_states(target: PurgeTarget) -> Vec<&'static str> {
    match target {
        PurgeTarget::DeadJobs => vec!["dead"],
        _ => vec!["completed", "cancelled"],
    }
}

pub(crate) async fn job_retry<'e, E>(ex: E, p: JobRetry) -> StoreResult<Vec<JobRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../queries/job/retry.sql"))
        .bind(p.ids)
        .bind(p.now)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    row::sorted_jobs(rows)
}

pub(crate) async fn job_discard<'e, E>(ex: E, p: JobDiscard) -> StoreResult<Vec<i64>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../queries/job/discard.sql"))
        .bind(p.ids)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    first_ids(&rows)
}

pub(crate) async fn purge<'e, E>(ex: E, p: Purge) -> StoreResult<u64>
where
    E: Executor<'e, Database = Postgres>,
{
    let limit = i64::from(p.limit);
    let q = match p.target {
        PurgeTarget::EnqueueKeys => sqlx::query(include_str!("../queries/purge/enqueue_keys.sql")),
        PurgeTarget::EffectKeys => sqlx::query(include_str!("../queries/purge/effect_keys.sql")),
        PurgeTarget::FinishedJobs | PurgeTarget::DeadJobs => {
            sqlx::query(include_str!("../queries/purge/jobs.sql"))
        }
    };
    let q = q.bind(p.before).bind(limit);
    let q = match p.target {
        PurgeTarget::FinishedJobs | PurgeTarget::DeadJobs => q.bind(purged_states(p.target)),
        _ => q,
    };
    count(q.fetch_one(ex).await.map_err(interpret_error)?)
}

pub(crate) async fn purge_count<'e, E>(
    ex: E,
    target: PurgeTarget,
    before: Timestamp,
) -> StoreResult<u64>
where
    E: Executor<'e, Database = Postgres>,
{
    let q = match target {
        PurgeTarget::EnqueueKeys => {
            sqlx::query(include_str!("../queries/purge/count_enqueue_keys.sql")).bind(before)
        }
        PurgeTarget::EffectKeys => {
            sqlx::query(include_str!("../queries/purge/count_effect_keys.sql")).bind(before)
        }
        PurgeTarget::FinishedJobs | PurgeTarget::DeadJobs => {
            sqlx::query(include_str!("../queries/purge/count_jobs.sql"))
                .bind(before)
                .bind(purged_states(target))
        }
    };
    count(q.fetch_one(ex).await.map_err(interpret_error)?)
}

/// The first column of each row, an id.
fn first_ids(rows: &[sqlx::postgres::PgRow]) -> StoreResult<Vec<i64>> {
    rows.iter()
        .map(|r| r.try_get::<i64, _>(0).map_err(interpret_error))
        .collect()
}

fn count(r: sqlx::postgres::PgRow) -> StoreResult<u64> {
    let n: i64 = r.try_get(0).map_err(interpret_error)?;
    Ok(n.max(0) as u64)
}

pub(crate) async fn enqueue_key_take<'e, E>(ex: E, p: EnqueueKeyTake) -> StoreResult<Vec<i64>>
where
    E: Executor<'e, Database = Postgres>,
{
    let keys: Vec<serde_json::Value> = p
        .keys
        .iter()
        .map(|(queue, key, job_id)| serde_json::json!({"queue": queue, "key": key, "job_id": job_id}))
        .collect();
    let rows = sqlx::query(include_str!("../queries/enqueue_key/take.sql"))
        .bind(serde_json::Value::Array(keys))
        .bind(p.window_ms)
        .bind(p.now)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    first_ids(&rows)
}

pub(crate) async fn enqueue_key_find<'e, E>(
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
    let rows = sqlx::query(include_str!("../queries/enqueue_key/find.sql"))
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

pub(crate) async fn job_delete<'e, E>(ex: E, ids: Vec<i64>) -> StoreResult<u64>
where
    E: Executor<'e, Database = Postgres>,
{
    let done = sqlx::query(include_str!("../queries/job/delete.sql"))
        .bind(ids)
        .execute(ex)
        .await
        .map_err(interpret_error)?;
    Ok(done.rows_affected())
}

pub(crate) async fn job_get_many<'e, E>(ex: E, ids: Vec<i64>) -> StoreResult<Vec<JobRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../queries/job/get_many.sql"))
        .bind(ids)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    rows.iter().map(row::job).collect()
}
