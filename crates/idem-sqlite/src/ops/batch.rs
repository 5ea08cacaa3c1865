//! The batch operations (`queries/batch/`): insert, shard totals and counts, lock, seal,
//! finish, and reads. Each is one statement; the orchestration that strings them together (and
//! enqueues a successor) is `idem_store::batch`, the same for both stores.

use idem_store::{
    BatchChildren, BatchCount, BatchFinish, BatchInsert, BatchList, BatchRow, BatchSeal, JobRow,
    JobState, StoreError, StoreResult,
};
use rusqlite::{Connection, params};

use super::{job_rows, json_list, rows};
use crate::error::interpret_error;
use crate::row::{self, ts_to_ms};

/// The batch row a statement returned, if any.
fn one(c: &Connection, sql: &str, args: impl rusqlite::Params) -> StoreResult<Option<BatchRow>> {
    Ok(rows(c, sql, args, row::batch)?.into_iter().next())
}

pub(crate) fn insert(c: &Connection, p: &BatchInsert) -> StoreResult<BatchRow> {
    let sql = include_str!("../../queries/batch/insert.sql");
    let failure = p.failure_successor.as_ref().map(json_list).transpose()?;
    let args = params![
        p.on_dead.as_str(),
        json_list(&p.successor)?,
        failure,
        p.key_window_ms,
        p.principal,
        p.now.map(ts_to_ms)
    ];
    one(c, sql, args)?.ok_or_else(|| StoreError::Database("a batch insert returned no row".into()))
}

pub(crate) fn shards_lock(c: &Connection, batch_id: i64) -> StoreResult<()> {
    let sql = include_str!("../../queries/batch/shards_lock.sql");
    rows(c, sql, [batch_id], |_| Ok(()))?;
    Ok(())
}

pub(crate) fn shards_add(c: &Connection, p: &BatchCount) -> StoreResult<()> {
    #[derive(serde::Serialize)]
    struct Item {
        shard: i32,
        total: i64,
    }
    let items: Vec<Item> = p
        .shards
        .iter()
        .map(|s| Item {
            shard: s.shard,
            total: s.total,
        })
        .collect();
    let sql = include_str!("../../queries/batch/shards_add.sql");
    let mut stmt = c.prepare_cached(sql).map_err(interpret_error)?;
    stmt.execute(params![p.batch_id, json_list(&items)?])
        .map_err(interpret_error)?;
    Ok(())
}

pub(crate) fn count(c: &Connection, p: &BatchCount) -> StoreResult<Vec<i32>> {
    let sql = include_str!("../../queries/batch/count.sql");
    let mut complete = Vec::new();
    for s in &p.shards {
        let args = params![p.batch_id, s.shard, s.completed, s.dead, s.cancelled];
        let done = rows(c, sql, args, |r| {
            Ok((
                r.get::<_, i32>("shard").map_err(interpret_error)?,
                r.get::<_, bool>("complete").map_err(interpret_error)?,
            ))
        })?;
        complete.extend(done.into_iter().filter(|(_, c)| *c).map(|(s, _)| s));
    }
    Ok(complete)
}

/// Whether a statement that returns the batch's id when it applies returned a row.
fn applied(c: &Connection, sql: &str, args: impl rusqlite::Params) -> StoreResult<bool> {
    let ids = rows(c, sql, args, |r| {
        r.get::<_, i64>(0).map_err(interpret_error)
    })?;
    Ok(!ids.is_empty())
}

pub(crate) fn lock(c: &Connection, batch_id: i64, open_only: bool) -> StoreResult<bool> {
    let sql = include_str!("../../queries/batch/lock.sql");
    applied(c, sql, params![batch_id, open_only])
}

pub(crate) fn seal(c: &Connection, p: &BatchSeal) -> StoreResult<bool> {
    let sql = include_str!("../../queries/batch/seal.sql");
    applied(c, sql, params![p.batch_id, p.now.map(ts_to_ms)])
}

pub(crate) fn finish(c: &Connection, p: &BatchFinish) -> StoreResult<bool> {
    let sql = include_str!("../../queries/batch/finish.sql");
    applied(
        c,
        sql,
        params![p.batch_id, p.successor_job_id, p.now.map(ts_to_ms)],
    )
}

pub(crate) fn get(c: &Connection, batch_id: i64) -> StoreResult<Option<BatchRow>> {
    one(c, include_str!("../../queries/batch/get.sql"), [batch_id])
}

pub(crate) fn list(c: &Connection, p: &BatchList) -> StoreResult<Vec<BatchRow>> {
    let sql = include_str!("../../queries/batch/list.sql");
    let args = params![
        p.state.map(|s| s.as_str()),
        p.principal,
        p.before_id,
        i64::from(p.limit)
    ];
    rows(c, sql, args, row::batch)
}

pub(crate) fn children(c: &Connection, p: &BatchChildren) -> StoreResult<Vec<JobRow>> {
    let sql = include_str!("../../queries/batch/children.sql");
    job_rows(c, sql, params![p.batch_id, p.after_id, i64::from(p.limit)])
}

pub(crate) fn states(c: &Connection, batch_id: i64) -> StoreResult<Vec<(JobState, i64)>> {
    let sql = include_str!("../../queries/batch/states.sql");
    rows(c, sql, [batch_id], row::state_count)
}
