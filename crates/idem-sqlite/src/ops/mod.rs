//! Every store operation as one blocking function on a [`Connection`]; the writer thread
//! and the readers run them. One module per area, mirroring `queries/<area>/` and the
//! same modules of `idem-postgres`, each holding the operations of that area; here, the
//! helpers they share. The writer (`writer/`) brackets them in transactions.
//!
//! Each guarded write names state and fence in its `WHERE` clause; zero rows is
//! `LeaseLost`. The attempt history row is written in the same transaction as the state
//! change it records. Statements come from `queries/`, prepared once per connection
//! (`prepare_cached`), with `?N` placeholders bound by number.

pub(crate) mod batch;
pub(crate) mod clock;
pub(crate) mod counter;
pub(crate) mod effect;
pub(crate) mod enqueue_key;
pub(crate) mod http_key;
pub(crate) mod intent;
pub(crate) mod job;
pub(crate) mod job_attempt;
pub(crate) mod leader;
pub(crate) mod ledger;
pub(crate) mod purge;
pub(crate) mod queue;

use idem_store::{JobRow, LeaseToken, StoreError, StoreResult};
use rusqlite::{Connection, Params, Row};

use crate::error::interpret_error;

/// Runs a cached statement to its end, ignoring rows.
fn exec(c: &Connection, sql: &str, params: impl Params) -> StoreResult<()> {
    let mut stmt = c.prepare_cached(sql).map_err(interpret_error)?;
    let mut rows = stmt.query(params).map_err(interpret_error)?;
    while rows.next().map_err(interpret_error)?.is_some() {}
    Ok(())
}

/// Runs a cached statement and decodes every row it returns.
fn rows<T>(
    c: &Connection,
    sql: &str,
    params: impl Params,
    decode: fn(&Row<'_>) -> StoreResult<T>,
) -> StoreResult<Vec<T>> {
    let mut stmt = c.prepare_cached(sql).map_err(interpret_error)?;
    let mut rows = stmt.query(params).map_err(interpret_error)?;
    let mut out = Vec::new();
    while let Some(r) = rows.next().map_err(interpret_error)? {
        out.push(decode(r)?);
    }
    Ok(out)
}

/// Runs a statement that returns `idem_job` rows; the columns are found once per call.
fn job_rows(c: &Connection, sql: &str, params: impl Params) -> StoreResult<Vec<JobRow>> {
    let mut stmt = c.prepare_cached(sql).map_err(interpret_error)?;
    let columns = crate::row::JobColumns::of(&stmt)?;
    let mut rows = stmt.query(params).map_err(interpret_error)?;
    let mut out = Vec::new();
    while let Some(r) = rows.next().map_err(interpret_error)? {
        out.push(columns.job(r)?);
    }
    Ok(out)
}

/// A job returned by a guarded statement, or `LeaseLost` when it returned none.
fn guarded(jobs: Vec<JobRow>, lease: LeaseToken) -> StoreResult<JobRow> {
    jobs.into_iter().next().ok_or(StoreError::lease_lost(lease))
}

/// The record under `key` that a guarded insert found taken; none means the insert's
/// fence guard refused it, so the claim is not current.
fn existing<T>(
    c: &Connection,
    sql: &str,
    key: &str,
    lease: LeaseToken,
    decode: fn(&Row<'_>) -> StoreResult<T>,
) -> StoreResult<T> {
    rows(c, sql, [key], decode)?
        .pop()
        .ok_or(StoreError::lease_lost(lease))
}

/// A list as the JSON text the statements unpack with `json_each`.
fn json_list<T: serde::Serialize>(items: &T) -> StoreResult<String> {
    serde_json::to_string(items)
        .map_err(|e| StoreError::Invalid(format!("cannot encode a list for a statement: {e}")))
}
