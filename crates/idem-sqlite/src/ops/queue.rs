//! Per-queue counts of jobs by state, of waiting jobs by kind and of jobs finished in a
//! time range, and pausing queues (`queries/queue/`).

use idem_store::{
    PausedQueue, QueueCount, QueueFinished, QueueFinishedList, QueuePause, QueueWaiting,
    StoreResult,
};
use rusqlite::{Connection, params};

use super::rows;
use crate::row::{self, ts_to_ms};

pub(crate) fn counts(c: &Connection) -> StoreResult<Vec<QueueCount>> {
    let sql = include_str!("../../queries/queue/counts.sql");
    rows(c, sql, [], row::queue_count)
}

pub(crate) fn waiting(c: &Connection) -> StoreResult<Vec<QueueWaiting>> {
    let sql = include_str!("../../queries/queue/waiting.sql");
    rows(c, sql, [], row::queue_waiting)
}

/// Per queue, the jobs finalized (completed or dead) in `[since, until)`.
pub(crate) fn finished(c: &Connection, p: &QueueFinishedList) -> StoreResult<Vec<QueueFinished>> {
    let sql = include_str!("../../queries/queue/finished.sql");
    rows(
        c,
        sql,
        params![ts_to_ms(p.since), ts_to_ms(p.until)],
        row::queue_finished,
    )
}

pub(crate) fn paused(c: &Connection) -> StoreResult<Vec<PausedQueue>> {
    let sql = include_str!("../../queries/queue/paused.sql");
    rows(c, sql, [], row::paused_queue)
}

pub(crate) fn pause(c: &Connection, p: &QueuePause) -> StoreResult<bool> {
    let sql = include_str!("../../queries/queue/pause.sql");
    let args = params![p.queue, p.now.map(ts_to_ms), p.by];
    Ok(!rows(c, sql, args, |_| Ok(()))?.is_empty())
}

pub(crate) fn resume(c: &Connection, queue: &str) -> StoreResult<bool> {
    let sql = include_str!("../../queries/queue/resume.sql");
    Ok(!rows(c, sql, params![queue], |_| Ok(()))?.is_empty())
}
