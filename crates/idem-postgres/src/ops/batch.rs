//! The batch operations (`queries/batch/`): insert, shard totals and counts, lock, seal,
//! finish, and reads. Each is one statement on any executor; the orchestration that strings them
//! together (and enqueues a successor) is `idem_store::batch`, the same for both stores.

use idem_store::{
    BatchChildren, BatchCount, BatchFinish, BatchInsert, BatchList, BatchRow, BatchSeal, JobRow,
    JobState, ShardCount, StoreResult,
};
use sqlx::types::Json;
use sqlx::{Executor, Postgres};

use crate::error::interpret_error;
use crate::row;

/// The batch row a statement returned, if any.
async fn one<'e, E>(
    ex: E,
    q: sqlx::query::Query<'static, Postgres, sqlx::postgres::PgArguments>,
) -> StoreResult<Option<BatchRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let row = q.fetch_optional(ex).await.map_err(interpret_error)?;
    row.as_ref().map(row::batch).transpose()
}

pub(crate) async fn insert<'e, E>(ex: E, p: BatchInsert) -> StoreResult<BatchRow>
where
    E: Executor<'e, Database = Postgres>,
{
    let q = sqlx::query(include_str!("../../queries/batch/insert.sql"))
        .bind(p.on_dead.as_str())
        .bind(Json(p.successor))
        .bind(p.failure_successor.map(Json))
        .bind(p.key_window_ms)
        .bind(p.principal)
        .bind(p.now);
    let row = q.fetch_one(ex).await.map_err(interpret_error)?;
    row::batch(&row)
}

/// The shards and one of their columns, as the arrays the batch statements unnest.
fn column(p: &BatchCount, f: fn(&ShardCount) -> i64) -> Vec<i64> {
    p.shards.iter().map(f).collect()
}

fn shard_ids(p: &BatchCount) -> Vec<i32> {
    p.shards.iter().map(|c| c.shard).collect()
}

pub(crate) async fn shards_lock<'e, E>(ex: E, batch_id: i64) -> StoreResult<()>
where
    E: Executor<'e, Database = Postgres>,
{
    sqlx::query(include_str!("../../queries/batch/shards_lock.sql"))
        .bind(batch_id)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    Ok(())
}

pub(crate) async fn shards_add<'e, E>(ex: E, p: BatchCount) -> StoreResult<()>
where
    E: Executor<'e, Database = Postgres>,
{
    sqlx::query(include_str!("../../queries/batch/shards_add.sql"))
        .bind(p.batch_id)
        .bind(shard_ids(&p))
        .bind(column(&p, |c| c.total))
        .execute(ex)
        .await
        .map_err(interpret_error)?;
    Ok(())
}

pub(crate) async fn count<'e, E>(ex: E, p: BatchCount) -> StoreResult<Vec<i32>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/batch/count.sql"))
        .bind(p.batch_id)
        .bind(shard_ids(&p))
        .bind(column(&p, |c| c.completed))
        .bind(column(&p, |c| c.dead))
        .bind(column(&p, |c| c.cancelled))
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    let mut complete = Vec::new();
    for r in &rows {
        if row::get::<bool>(r, "complete")? {
            complete.push(row::get::<i32>(r, "shard")?);
        }
    }
    Ok(complete)
}

/// Whether a statement that returns the batch's id when it applies returned a row.
async fn applied<'e, E>(
    ex: E,
    q: sqlx::query::Query<'static, Postgres, sqlx::postgres::PgArguments>,
) -> StoreResult<bool>
where
    E: Executor<'e, Database = Postgres>,
{
    let row = q.fetch_optional(ex).await.map_err(interpret_error)?;
    Ok(row.is_some())
}

pub(crate) async fn lock<'e, E>(ex: E, batch_id: i64, open_only: bool) -> StoreResult<bool>
where
    E: Executor<'e, Database = Postgres>,
{
    let q = sqlx::query(include_str!("../../queries/batch/lock.sql"))
        .bind(batch_id)
        .bind(open_only);
    applied(ex, q).await
}

pub(crate) async fn seal<'e, E>(ex: E, p: BatchSeal) -> StoreResult<bool>
where
    E: Executor<'e, Database = Postgres>,
{
    let q = sqlx::query(include_str!("../../queries/batch/seal.sql"))
        .bind(p.batch_id)
        .bind(p.now);
    applied(ex, q).await
}

pub(crate) async fn finish<'e, E>(ex: E, p: BatchFinish) -> StoreResult<bool>
where
    E: Executor<'e, Database = Postgres>,
{
    let q = sqlx::query(include_str!("../../queries/batch/finish.sql"))
        .bind(p.batch_id)
        .bind(p.successor_job_id)
        .bind(p.now);
    applied(ex, q).await
}

pub(crate) async fn get<'e, E>(ex: E, batch_id: i64) -> StoreResult<Option<BatchRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let q = sqlx::query(include_str!("../../queries/batch/get.sql")).bind(batch_id);
    one(ex, q).await
}

pub(crate) async fn list<'e, E>(ex: E, p: BatchList) -> StoreResult<Vec<BatchRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/batch/list.sql"))
        .bind(p.state.map(|s| s.as_str()))
        .bind(p.principal)
        .bind(p.before_id)
        .bind(i64::from(p.limit))
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    rows.iter().map(row::batch).collect()
}

pub(crate) async fn children<'e, E>(ex: E, p: BatchChildren) -> StoreResult<Vec<JobRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/batch/children.sql"))
        .bind(p.batch_id)
        .bind(p.after_id)
        .bind(i64::from(p.limit))
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    row::jobs(&rows)
}

pub(crate) async fn states<'e, E>(ex: E, batch_id: i64) -> StoreResult<Vec<(JobState, i64)>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/batch/states.sql"))
        .bind(batch_id)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    rows.iter().map(row::state_count).collect()
}
