//! Inbound Idempotency-Key records (`queries/http_key/`): the reservation that takes a
//! key or learns what holds it (one conditional write on `(principal, key)`), and the
//! holding request's completion or release under the fence its reservation got.

use idem_store::{
    HttpKeyComplete, HttpKeyRelease, HttpKeyReserve, HttpKeyReserved, StoreError, StoreResult,
};
use rusqlite::{Connection, params};

use super::{json_list, rows};
use crate::error::interpret_error;
use crate::row::{self, ts_to_ms};

/// Reserves the key, or answers with what holds it. When the conditional write wrote
/// nothing, the holder is read with the same clock; the single writer keeps it from
/// changing in between.
pub(crate) fn reserve(c: &Connection, p: &HttpKeyReserve) -> StoreResult<HttpKeyReserved> {
    let sql = include_str!("../../queries/http_key/reserve.sql");
    let now = p.now.map(ts_to_ms);
    let args = params![
        p.principal,
        p.key,
        p.fingerprint,
        p.lease_ms,
        p.retention_ms,
        now
    ];
    if let Some(row) = rows(c, sql, args, row::http_key)?.pop() {
        return Ok(HttpKeyReserved::Reserved(row));
    }
    let sql = include_str!("../../queries/http_key/get.sql");
    let args = params![p.principal, p.key, now];
    match rows(c, sql, args, row::http_key_held)?.pop() {
        Some((row, now)) => Ok(HttpKeyReserved::Held { row, now }),
        None => Err(StoreError::Database(format!(
            "Idempotency-Key {:?} of {:?} was neither written nor found under the single \
             writer",
            p.key, p.principal
        ))),
    }
}

/// Stores the response; `false` when the fence no longer holds the key in progress.
pub(crate) fn complete(c: &Connection, p: &HttpKeyComplete) -> StoreResult<bool> {
    let sql = include_str!("../../queries/http_key/complete.sql");
    let args = params![
        p.principal,
        p.key,
        p.fence,
        p.status,
        json_list(&p.headers)?,
        p.body,
        ts_to_ms(p.created_at)
    ];
    let mut stmt = c.prepare_cached(sql).map_err(interpret_error)?;
    Ok(stmt.execute(args).map_err(interpret_error)? == 1)
}

/// Releases the key; `false` when the fence no longer holds it in progress.
pub(crate) fn release(c: &Connection, p: &HttpKeyRelease) -> StoreResult<bool> {
    let sql = include_str!("../../queries/http_key/release.sql");
    let mut stmt = c.prepare_cached(sql).map_err(interpret_error)?;
    let n = stmt
        .execute(params![p.principal, p.key, p.fence, ts_to_ms(p.created_at)])
        .map_err(interpret_error)?;
    Ok(n == 1)
}
