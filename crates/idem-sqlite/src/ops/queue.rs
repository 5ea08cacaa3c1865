//! Per-queue counts of jobs by state, and of waiting jobs by kind (`queries/queue/`).

use idem_store::{QueueCount, QueueWaiting, StoreResult};
use rusqlite::Connection;

use super::rows;
use crate::row;

pub(crate) fn counts(c: &Connection) -> StoreResult<Vec<QueueCount>> {
    let sql = include_str!("../../queries/queue/counts.sql");
    rows(c, sql, [], row::queue_count)
}

pub(crate) fn waiting(c: &Connection) -> StoreResult<Vec<QueueWaiting>> {
    let sql = include_str!("../../queries/queue/waiting.sql");
    rows(c, sql, [], row::queue_waiting)
}
