//! The attempt history (`queries/job_attempt/`): one row per finished claim that did not
//! complete the job, written in the transaction of the state change it records (a
//! completed attempt is the job's row itself); listed per job, and its earliest start
//! per job read; deleted with its job.
//!
//! SQLite dialect: the job statements cannot write attempt rows themselves (no
//! data-modifying CTEs), so the job operations call these right after their update.

use idem_store::{AttemptOutcome, AttemptRow, JobRow, StoreResult, Timestamp};
use rusqlite::{Connection, params};

use super::{exec, json_list, rows};
use crate::row::{self, ts_to_ms};

pub(crate) fn list(c: &Connection, job_id: i64) -> StoreResult<Vec<AttemptRow>> {
    let sql = include_str!("../../queries/job_attempt/list.sql");
    rows(c, sql, [job_id], row::attempt)
}

/// When the first recorded attempt of each of `ids` started.
pub(crate) fn first_started(c: &Connection, ids: &[i64]) -> StoreResult<Vec<(i64, Timestamp)>> {
    let sql = include_str!("../../queries/job_attempt/first_started.sql");
    rows(c, sql, [json_list(&ids)?], row::first_started)
}

/// One attempt-history row to write for a job's current claim.
pub(super) struct AttemptRecord<'a> {
    pub(super) job_id: i64,
    pub(super) outcome: AttemptOutcome,
    pub(super) error: Option<&'a str>,
    pub(super) now: Option<Timestamp>,
    pub(super) only_if_state: Option<&'static str>,
}

impl<'a> AttemptRecord<'a> {
    pub(super) fn of(
        job: &JobRow,
        outcome: AttemptOutcome,
        error: Option<&'a str>,
        now: Option<Timestamp>,
    ) -> Self {
        let job_id = job.id;
        let only_if_state = None;
        AttemptRecord {
            job_id,
            outcome,
            error,
            now,
            only_if_state,
        }
    }
}

pub(super) fn insert(c: &Connection, rec: AttemptRecord<'_>) -> StoreResult<()> {
    let sql = include_str!("../../queries/job_attempt/insert.sql");
    let now = rec.now.map(ts_to_ms);
    let state = rec.only_if_state;
    let args = params![rec.job_id, rec.outcome.as_str(), rec.error, now, state];
    exec(c, sql, args)
}

/// The attempt history of jobs just deleted.
pub(super) fn delete(c: &Connection, ids: &[i64]) -> StoreResult<()> {
    let sql = include_str!("../../queries/job_attempt/delete.sql");
    exec(c, sql, [json_list(&ids)?])
}
