//! Purges (`queries/purge/`): one bounded batch of dedup records (enqueue keys, effect
//! keys, intents, Idempotency-Key records), finished jobs or finished batches older than a time, oldest first, and the count of what is left to purge. A purged job takes
//! its attempt history and enqueue key with it, in the same statement.

use idem_store::{Purge, PurgeTarget, StoreError, StoreResult, Timestamp};
use sqlx::postgres::PgRow;
use sqlx::{Executor, PgConnection, Postgres, Row};

use crate::error::interpret_error;

/// The job states a purge of `target` deletes.
fn purged_states(target: PurgeTarget) -> Vec<&'static str> {
    match target {
        PurgeTarget::DeadJobs => vec!["dead"],
        _ => vec!["completed", "cancelled"],
    }
}

pub(crate) async fn delete<'e, E>(ex: E, p: Purge) -> StoreResult<u64>
where
    E: Executor<'e, Database = Postgres>,
{
    let limit = i64::from(p.limit);
    let q = match p.target {
        PurgeTarget::EnqueueKeys => {
            sqlx::query(include_str!("../../queries/purge/enqueue_keys.sql"))
        }
        PurgeTarget::EffectKeys => sqlx::query(include_str!("../../queries/purge/effect_keys.sql")),
        PurgeTarget::Intents => sqlx::query(include_str!("../../queries/purge/intents.sql")),
        PurgeTarget::HttpKeys => sqlx::query(include_str!("../../queries/purge/http_keys.sql")),
        PurgeTarget::FinishedJobs | PurgeTarget::DeadJobs => {
            sqlx::query(include_str!("../../queries/purge/jobs.sql"))
        }
        PurgeTarget::Batches => {
            return Err(StoreError::Invalid(
                "a purge of batches runs in a transaction of its own (ops::purge::batches)".into(),
            ));
        }
    };
    let q = q.bind(p.before).bind(limit);
    let q = match p.target {
        PurgeTarget::FinishedJobs | PurgeTarget::DeadJobs => q.bind(purged_states(p.target)),
        _ => q,
    };
    first_count(q.fetch_one(ex).await.map_err(interpret_error)?)
}

/// Purges one batch of finished batches: picks them, locks their shard rows in order,
/// then deletes them (three statements, in the caller's transaction).
pub(crate) async fn batches(c: &mut PgConnection, p: Purge) -> StoreResult<u64> {
    let ids: Vec<i64> = sqlx::query_scalar(include_str!("../../queries/purge/pick_batches.sql"))
        .bind(p.before)
        .bind(i64::from(p.limit))
        .fetch_all(&mut *c)
        .await
        .map_err(interpret_error)?;
    if ids.is_empty() {
        return Ok(0);
    }
    sqlx::query(include_str!("../../queries/purge/batch_shards_lock.sql"))
        .bind(&ids)
        .fetch_all(&mut *c)
        .await
        .map_err(interpret_error)?;
    let q = sqlx::query(include_str!("../../queries/purge/batches.sql"))
        .bind(&ids)
        .bind(p.before);
    first_count(q.fetch_one(&mut *c).await.map_err(interpret_error)?)
}

pub(crate) async fn count<'e, E>(ex: E, target: PurgeTarget, before: Timestamp) -> StoreResult<u64>
where
    E: Executor<'e, Database = Postgres>,
{
    let q = match target {
        PurgeTarget::EnqueueKeys => {
            sqlx::query(include_str!("../../queries/purge/count_enqueue_keys.sql")).bind(before)
        }
        PurgeTarget::EffectKeys => {
            sqlx::query(include_str!("../../queries/purge/count_effect_keys.sql")).bind(before)
        }
        PurgeTarget::Intents => {
            sqlx::query(include_str!("../../queries/purge/count_intents.sql")).bind(before)
        }
        PurgeTarget::HttpKeys => {
            sqlx::query(include_str!("../../queries/purge/count_http_keys.sql")).bind(before)
        }
        PurgeTarget::Batches => {
            sqlx::query(include_str!("../../queries/purge/count_batches.sql")).bind(before)
        }
        PurgeTarget::FinishedJobs | PurgeTarget::DeadJobs => {
            sqlx::query(include_str!("../../queries/purge/count_jobs.sql"))
                .bind(before)
                .bind(purged_states(target))
        }
    };
    first_count(q.fetch_one(ex).await.map_err(interpret_error)?)
}

/// The count in the first column, never below zero.
fn first_count(r: PgRow) -> StoreResult<u64> {
    let n: i64 = r.try_get(0).map_err(interpret_error)?;
    Ok(n.max(0) as u64)
}
