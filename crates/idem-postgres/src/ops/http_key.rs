//! Inbound Idempotency-Key records (`queries/http_key/`): the reservation that takes a
//! key or learns what holds it (one conditional write on `(principal, key)`), and the
//! holding request's completion or release under the fence its reservation got.

use idem_store::{
    HttpKeyComplete, HttpKeyRelease, HttpKeyReserve, HttpKeyReserved, StoreError, StoreResult,
};
use sqlx::types::Json;
use sqlx::{Executor, PgConnection, Postgres};

use super::INSERT_TRIES;
use crate::error::interpret_error;
use crate::row;

/// Reserves the key, or answers with what holds it. When the conditional write wrote
/// nothing, the holder is read in a new statement, which sees the row as committed when
/// the write refused it (or later). Inside a transaction the row cannot vanish in
/// between: `ON CONFLICT DO UPDATE` locks the row it declined to update until the
/// transaction ends, so a purge waits. On a connection without a transaction it can (a
/// purge committed between the two statements): that is no reason to answer `Held`, and
/// the write is tried again, up to [`INSERT_TRIES`] times, as an intent's begin does.
pub(crate) async fn reserve(
    c: &mut PgConnection,
    p: HttpKeyReserve,
) -> StoreResult<HttpKeyReserved> {
    for _ in 0..INSERT_TRIES {
        let written = sqlx::query(include_str!("../../queries/http_key/reserve.sql"))
            .bind(&p.principal)
            .bind(&p.key)
            .bind(&p.fingerprint)
            .bind(p.lease_ms)
            .bind(p.retention_ms)
            .bind(p.now)
            .fetch_optional(&mut *c)
            .await
            .map_err(interpret_error)?;
        if let Some(r) = written {
            return Ok(HttpKeyReserved::Reserved(row::http_key(&r)?));
        }
        let held = sqlx::query(include_str!("../../queries/http_key/get.sql"))
            .bind(&p.principal)
            .bind(&p.key)
            .bind(p.now)
            .fetch_optional(&mut *c)
            .await
            .map_err(interpret_error)?;
        if let Some(r) = held {
            let row = row::http_key(&r)?;
            let now = row::get(&r, "now")?;
            return Ok(HttpKeyReserved::Held { row, now });
        }
    }
    Err(StoreError::Busy(format!(
        "the Idempotency-Key {:?} of {:?} was deleted between each of {INSERT_TRIES} \
         reservations and its read (a purge racing the request); retrying can help",
        p.key, p.principal
    )))
}

/// Stores the response; `false` when the fence no longer holds the key in progress.
pub(crate) async fn complete<'e, E>(ex: E, p: HttpKeyComplete) -> StoreResult<bool>
where
    E: Executor<'e, Database = Postgres>,
{
    let done = sqlx::query(include_str!("../../queries/http_key/complete.sql"))
        .bind(p.principal)
        .bind(p.key)
        .bind(p.fence)
        .bind(p.status)
        .bind(Json(p.headers))
        .bind(p.body)
        .bind(p.created_at)
        .execute(ex)
        .await
        .map_err(interpret_error)?;
    Ok(done.rows_affected() == 1)
}

/// Releases the key; `false` when the fence no longer holds it in progress.
pub(crate) async fn release<'e, E>(ex: E, p: HttpKeyRelease) -> StoreResult<bool>
where
    E: Executor<'e, Database = Postgres>,
{
    let done = sqlx::query(include_str!("../../queries/http_key/release.sql"))
        .bind(p.principal)
        .bind(p.key)
        .bind(p.fence)
        .bind(p.created_at)
        .execute(ex)
        .await
        .map_err(interpret_error)?;
    Ok(done.rows_affected() == 1)
}
