//! Per-queue counts of jobs by state, of waiting jobs by kind, and of jobs finished in a
//! time range (`queries/queue/`).

use idem_store::{QueueCount, QueueFinished, QueueFinishedList, QueueWaiting, StoreResult};
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
