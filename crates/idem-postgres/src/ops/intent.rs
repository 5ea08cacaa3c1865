//! Intents (`queries/intent/`): the reservation that takes a key or learns what holds it
//! (one conditional write, fenced by the job's claim), the holder's renewals and outcome
//! under the intent's own fence, and reconciliation's resolutions from the state and
//! fence it read.

use idem_store::intent::{outcome_columns, resolution_columns};
use idem_store::{
    IntentBegin, IntentBegun, IntentFinish, IntentList, IntentRenew, IntentResolve, IntentRow,
    StoreError, StoreResult,
};
use sqlx::types::Json;
use sqlx::{Executor, PgConnection, Postgres};

use super::{INSERT_TRIES, holder, kept_vanishing, still_current};
use crate::error::interpret_error;
use crate::row;

const GET: &str = include_str!("../../queries/intent/get.sql");

/// Reserves the key, or answers with what holds it. When the conditional write wrote
/// nothing, the claim is checked first (a stale claim learns nothing but `LeaseLost`),
/// then the holder is read; a holder deleted in between (purged) is
/// no reason to refuse: the write is tried again, up to [`INSERT_TRIES`] times.
pub(crate) async fn begin(c: &mut PgConnection, p: IntentBegin) -> StoreResult<IntentBegun> {
    for _ in 0..INSERT_TRIES {
        let written = sqlx::query(include_str!("../../queries/intent/begin.sql"))
            .bind(&p.key)
            .bind(&p.fingerprint)
            .bind(p.unkeyed)
            .bind(p.lease_ms)
            .bind(p.job.job_id)
            .bind(p.job.fence)
            .bind(p.now)
            .fetch_optional(&mut *c)
            .await
            .map_err(interpret_error)?;
        if let Some(r) = written {
            let row = row::intent(&r)?;
            return Ok(IntentBegun::of_written(row));
        }
        still_current(c, p.job).await?;
        if let Some(row) = holder(c, GET, &p.key, row::intent).await? {
            return Ok(IntentBegun::of_existing(row, &p.fingerprint));
        }
    }
    Err(kept_vanishing("intent", &p.key))
}

pub(crate) async fn renew<'e, E>(ex: E, p: IntentRenew) -> StoreResult<IntentRow>
where
    E: Executor<'e, Database = Postgres>,
{
    let r = sqlx::query(include_str!("../../queries/intent/renew.sql"))
        .bind(&p.token.key)
        .bind(p.token.fence)
        .bind(p.lease_ms)
        .bind(p.now)
        .fetch_optional(ex)
        .await
        .map_err(interpret_error)?;
    match r {
        Some(r) => row::intent(&r),
        None => Err(StoreError::intent_lost(&p.token)),
    }
}

pub(crate) async fn finish<'e, E>(ex: E, p: IntentFinish) -> StoreResult<IntentRow>
where
    E: Executor<'e, Database = Postgres>,
{
    let (state, result, error, refs) = outcome_columns(p.outcome);
    let r = sqlx::query(include_str!("../../queries/intent/finish.sql"))
        .bind(&p.token.key)
        .bind(p.token.fence)
        .bind(state.as_str())
        .bind(result.map(Json))
        .bind(error)
        .bind(Json(refs))
        .bind(p.now)
        .fetch_optional(ex)
        .await
        .map_err(interpret_error)?;
    match r {
        Some(r) => row::intent(&r),
        None => Err(StoreError::intent_lost(&p.token)),
    }
}

/// Resolves from the state and fence the resolver read; when nothing matched, reads the
/// intent to say whether it moved on (`Conflict`) or does not exist (`NotFound`).
pub(crate) async fn resolve(c: &mut PgConnection, p: IntentResolve) -> StoreResult<IntentRow> {
    let from: Vec<&str> = p.from.iter().map(|s| s.as_str()).collect();
    let (state, result, refs, error) = resolution_columns(p.resolution.clone());
    let r = sqlx::query(include_str!("../../queries/intent/resolve.sql"))
        .bind(&p.token.key)
        .bind(p.token.fence)
        .bind(&from)
        .bind(state.as_str())
        .bind(result.map(Json))
        .bind(refs.map(Json))
        .bind(error)
        .bind(p.now)
        .fetch_optional(&mut *c)
        .await
        .map_err(interpret_error)?;
    match r {
        Some(r) => row::intent(&r),
        None => Err(unresolved(c, &p).await),
    }
}

/// Why a resolution matched nothing.
async fn unresolved(c: &mut PgConnection, p: &IntentResolve) -> StoreError {
    match holder(c, GET, &p.token.key, row::intent).await {
        Ok(found) => p.refused(found.as_ref()),
        Err(e) => e,
    }
}

pub(crate) async fn get<'e, E>(ex: E, key: String) -> StoreResult<Option<IntentRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let r = sqlx::query(GET)
        .bind(key)
        .fetch_optional(ex)
        .await
        .map_err(interpret_error)?;
    r.as_ref().map(row::intent).transpose()
}

/// Intent `key`, share-locked until the transaction ends: a resolution (an `UPDATE`)
/// waits for it, and this read waits for a resolution in flight and sees its outcome.
pub(crate) async fn lock(c: &mut PgConnection, key: String) -> StoreResult<Option<IntentRow>> {
    let r = sqlx::query(include_str!("../../queries/intent/lock.sql"))
        .bind(key)
        .fetch_optional(c)
        .await
        .map_err(interpret_error)?;
    r.as_ref().map(row::intent).transpose()
}

pub(crate) async fn counts<'e, E>(ex: E) -> StoreResult<Vec<idem_store::IntentCount>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/intent/counts.sql"))
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    rows.iter().map(row::intent_count).collect()
}

pub(crate) async fn list<'e, E>(ex: E, p: IntentList) -> StoreResult<Vec<IntentRow>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/intent/list.sql"))
        .bind(p.state_names())
        .bind(p.unkeyed)
        .bind(p.updated_before)
        .bind(p.created_since)
        .bind(p.job_id)
        .bind(p.after.clone())
        .bind(i64::from(p.limit))
        .bind(p.principal.clone())
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    rows.iter().map(row::intent).collect()
}
