//! Intents (`queries/intent/`): the reservation that takes a key or learns what holds it
//! (one conditional write, fenced by the job's claim), the holder's renewals and outcome
//! under the intent's own fence, and reconciliation's resolutions from the state and
//! fence it read.

use idem_store::intent::{outcome_columns, resolution_columns};
use idem_store::{
    IntentBegin, IntentBegun, IntentFinish, IntentList, IntentRenew, IntentResolve, IntentRow,
    JobLock, StoreError, StoreResult,
};
use rusqlite::{Connection, params};

use super::{json_list, rows};
use crate::row::{self, ts_to_ms};

const GET: &str = include_str!("../../queries/intent/get.sql");

/// Reserves the key, or answers with what holds it. When the conditional write wrote
/// nothing, the claim is checked first (a stale claim learns nothing but `LeaseLost`),
/// then the holder is read; the single writer keeps it from changing in between.
pub(crate) fn begin(c: &Connection, p: &IntentBegin) -> StoreResult<IntentBegun> {
    let sql = include_str!("../../queries/intent/begin.sql");
    let args = params![
        p.key,
        p.fingerprint,
        p.unkeyed,
        p.lease_ms,
        p.job.job_id,
        p.job.fence,
        p.now.map(ts_to_ms)
    ];
    if let Some(row) = rows(c, sql, args, row::intent)?.pop() {
        return Ok(IntentBegun::of_written(row));
    }
    super::job::lock(c, &JobLock::of(p.job))?;
    match get(c, &p.key)? {
        Some(row) => Ok(IntentBegun::of_existing(row, &p.fingerprint)),
        None => Err(StoreError::Database(format!(
            "intent {:?} was neither written nor found under the single writer",
            p.key
        ))),
    }
}

pub(crate) fn renew(c: &Connection, p: &IntentRenew) -> StoreResult<IntentRow> {
    let sql = include_str!("../../queries/intent/renew.sql");
    let args = params![p.token.key, p.token.fence, p.lease_ms, p.now.map(ts_to_ms)];
    rows(c, sql, args, row::intent)?
        .pop()
        .ok_or_else(|| StoreError::intent_lost(&p.token))
}

pub(crate) fn finish(c: &Connection, p: &IntentFinish) -> StoreResult<IntentRow> {
    let (state, result, error, refs) = outcome_columns(p.outcome.clone());
    let sql = include_str!("../../queries/intent/finish.sql");
    let args = params![
        p.token.key,
        p.token.fence,
        state.as_str(),
        result.as_ref().map(json_list).transpose()?,
        error,
        json_list(&refs)?,
        p.now.map(ts_to_ms)
    ];
    rows(c, sql, args, row::intent)?
        .pop()
        .ok_or_else(|| StoreError::intent_lost(&p.token))
}

/// Resolves from the state and fence the resolver read; when nothing matched, reads the
/// intent to say whether it moved on (`Conflict`) or does not exist (`NotFound`).
pub(crate) fn resolve(c: &Connection, p: &IntentResolve) -> StoreResult<IntentRow> {
    let from: Vec<&str> = p.from.iter().map(|s| s.as_str()).collect();
    let (state, result, refs, error) = resolution_columns(p.resolution.clone());
    let sql = include_str!("../../queries/intent/resolve.sql");
    let args = params![
        p.token.key,
        p.token.fence,
        json_list(&from)?,
        state.as_str(),
        result.as_ref().map(json_list).transpose()?,
        refs.as_ref().map(json_list).transpose()?,
        error,
        p.now.map(ts_to_ms)
    ];
    match rows(c, sql, args, row::intent)?.pop() {
        Some(row) => Ok(row),
        None => Err(unresolved(c, p)),
    }
}

/// Why a resolution matched nothing.
fn unresolved(c: &Connection, p: &IntentResolve) -> StoreError {
    match get(c, &p.token.key) {
        Ok(found) => p.refused(found.as_ref()),
        Err(e) => e,
    }
}

pub(crate) fn get(c: &Connection, key: &str) -> StoreResult<Option<IntentRow>> {
    Ok(rows(c, GET, [key], row::intent)?.pop())
}

/// Intent `key`, read in the writer's transaction: no other writer (no resolution)
/// runs until it ends.
pub(crate) fn lock(c: &Connection, key: &str) -> StoreResult<Option<IntentRow>> {
    let sql = include_str!("../../queries/intent/lock.sql");
    Ok(rows(c, sql, [key], row::intent)?.pop())
}

pub(crate) fn counts(c: &Connection) -> StoreResult<Vec<idem_store::IntentCount>> {
    let sql = include_str!("../../queries/intent/counts.sql");
    rows(c, sql, [], row::intent_count)
}

pub(crate) fn list(c: &Connection, p: &IntentList) -> StoreResult<Vec<IntentRow>> {
    let sql = include_str!("../../queries/intent/list.sql");
    let args = params![
        json_list(&p.state_names())?,
        p.unkeyed,
        p.updated_before.map(ts_to_ms),
        p.created_since.map(ts_to_ms),
        p.job_id,
        p.after,
        i64::from(p.limit),
        p.principal
    ];
    rows(c, sql, args, row::intent)
}
