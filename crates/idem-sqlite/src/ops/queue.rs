//! Per-queue counts of jobs by state (`queries/queue/`).

use idem_store::{QueueCount, StoreResult};
use rusqlite::Connection;

use super::rows;
use crate::row;

pub(crate) fn counts(c: &Connection) -> StoreResult<Vec<QueueCount>> {
    let sql = include_str!("../../queries/queue/counts.sql");
    rows(c, sql, [], row::queue_count)
}
