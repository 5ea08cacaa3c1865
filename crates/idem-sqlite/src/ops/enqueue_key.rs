//! Enqueue keys (`queries/enqueue_key/`): the building blocks of
//! `idem_store::enqueue`, which takes a batch's keys after inserting its jobs and looks
//! up the holders of the keys it did not get; and the delete of a deleted job's key.

use idem_store::{EnqueueKeyTake, StoreResult};
use rusqlite::{Connection, params};

use super::{exec, json_list, rows};
use crate::error::interpret_error;
use crate::row::ts_to_ms;

pub(crate) fn take(c: &Connection, p: &EnqueueKeyTake) -> StoreResult<Vec<i64>> {
    #[derive(serde::Serialize)]
    struct Key<'a> {
        queue: &'a str,
        key: &'a str,
        job_id: i64,
    }
    let keys: Vec<Key<'_>> = p
        .keys
        .iter()
        .map(|(queue, key, job_id)| Key {
            queue,
            key,
            job_id: *job_id,
        })
        .collect();
    let sql = include_str!("../../queries/enqueue_key/take.sql");
    let args = params![json_list(&keys)?, p.window_ms, p.now.map(ts_to_ms)];
    rows(c, sql, args, |r| r.get(0).map_err(interpret_error))
}

pub(crate) fn find(
    c: &Connection,
    keys: &[(String, String)],
) -> StoreResult<Vec<(String, String, i64)>> {
    let keys: Vec<serde_json::Value> = keys
        .iter()
        .map(|(queue, key)| serde_json::json!({ "queue": queue, "key": key }))
        .collect();
    let sql = include_str!("../../queries/enqueue_key/find.sql");
    rows(c, sql, [json_list(&keys)?], |r| {
        Ok((
            r.get(0).map_err(interpret_error)?,
            r.get(1).map_err(interpret_error)?,
            r.get(2).map_err(interpret_error)?,
        ))
    })
}

/// The enqueue keys of jobs just deleted, so a key never points at a missing job.
pub(super) fn delete(c: &Connection, ids: &[i64]) -> StoreResult<()> {
    let sql = include_str!("../../queries/enqueue_key/delete.sql");
    exec(c, sql, [json_list(&ids)?])
}
