//! The job operations (`queries/job/`): insert, claim, heartbeat, lock, the fenced
//! finishes (complete, complete-many, fail), rescue, cancel, the dead-letter retry and
//! discard, and reads by id or filter.
//!
//! Complete, complete-many, fail, rescue and cancel write their attempt rows
//! (`job_attempt`) after the update, in the same transaction; a job deleted by discard
//! takes its attempt history and enqueue key with it.

use std::sync::OnceLock;

use idem_store::{
    AttemptOutcome, Completed, Inserted, JobCancel, JobClaim, JobComplete, JobCompleteMany,
    JobDiscard, JobFail, JobHeartbeat, JobInsert, JobList, JobLock, JobPutBack, JobRescue,
    JobRetry, JobRow, JobState, LeaseRenewal, StoreError, StoreResult,
};
use rusqlite::{Connection, ToSql, params};

use super::job_attempt::{self, AttemptRecord};
use super::{enqueue_key, guarded, job_rows, json_list, rows};
use crate::error::interpret_error;
use crate::row::{self, ts_to_ms};

fn sorted(mut jobs: Vec<JobRow>) -> Vec<JobRow> {
    jobs.sort_by_key(|j| j.id);
    jobs
}

pub(crate) fn get(c: &Connection, id: i64) -> StoreResult<Option<JobRow>> {
    let jobs = job_rows(c, include_str!("../../queries/job/get.sql"), [id])?;
    Ok(jobs.into_iter().next())
}

/// The oldest job that awaited intent `key`.
pub(crate) fn awaiting(c: &Connection, key: &str) -> StoreResult<Option<JobRow>> {
    let jobs = job_rows(c, include_str!("../../queries/job/awaiting.sql"), [key])?;
    Ok(jobs.into_iter().next())
}

pub(crate) fn list(c: &Connection, p: &JobList) -> StoreResult<Vec<JobRow>> {
    let sql = include_str!("../../queries/job/list.sql");
    let state = p.state.map(|s| s.as_str());
    let args = params![
        state,
        p.queue,
        p.kind,
        p.before_id,
        i64::from(p.limit),
        p.principal
    ];
    job_rows(c, sql, args)
}

/// Rows per execution of the multi-row insert; a batch's remainder goes one row at a time.
const INSERT_ROWS: usize = 64;

/// The text of `job/insert.sql` with `rows` copies of its row (each size built once).
fn insert_sql(rows: usize) -> &'static str {
    static ONE: OnceLock<String> = OnceLock::new();
    static MANY: OnceLock<String> = OnceLock::new();
    let build = move || {
        let head = include_str!("../../queries/job/insert.sql");
        let row: String = include_str!("../../queries/job/insert_values.sql")
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect();
        let values = vec![row.trim(); rows].join(",\n");
        format!("{head}{values}")
    };
    match rows {
        1 => ONE.get_or_init(build),
        INSERT_ROWS => MANY.get_or_init(build),
        _ => unreachable!("insert statements are built for 1 or {INSERT_ROWS} rows"),
    }
}

/// Inserts the batch's jobs in order, `INSERT_ROWS` per execution of a prepared
/// multi-row insert, with one reading of the clock and of the highest id: the store
/// chooses each id, state and claim itself, so nothing is read back.
pub(crate) fn insert(c: &Connection, p: JobInsert) -> StoreResult<Vec<JobRow>> {
    if p.jobs.is_empty() {
        return Ok(Vec::new());
    }
    let now = match p.now {
        Some(now) => ts_to_ms(now),
        None => super::clock::now(c)?,
    };
    let next_id: i64 = c
        .prepare_cached(include_str!("../../queries/job/next_id.sql"))
        .and_then(|mut s| s.query_row([], |r| r.get(0)))
        .map_err(interpret_error)?;
    let args = p
        .jobs
        .iter()
        .map(|j| serde_json::to_string(&j.args))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StoreError::Invalid(format!("cannot encode a job's args: {e}")))?;
    let mut paused: Vec<(&str, bool)> = Vec::new();
    let mut values = Vec::with_capacity(p.jobs.len());
    for ((id, j), args) in (next_id + 1..).zip(&p.jobs).zip(&args) {
        let claim = match &j.claim {
            Some(claim) if !known_paused(c, &mut paused, &j.queue)? => Some(claim),
            _ => None,
        };
        let run_at = j.run_at.map_or(now, ts_to_ms);
        values.push(JobValues {
            id,
            kind: &j.kind,
            queue: &j.queue,
            args,
            priority: j.priority,
            state: match claim {
                Some(_) => JobState::Running,
                None if run_at > now => JobState::Scheduled,
                None => JobState::Available,
            },
            max_attempts: j.max_attempts,
            run_at,
            created_at: now,
            lease: claim.map(|c| (c.worker.as_str(), now, now + c.lease_ms)),
            enqueue_key: j.enqueue_key.as_deref(),
            principal: j.principal.as_deref(),
            batch_id: j.batch_id,
            follows_job: j.follows_job,
            follows_batch: j.follows_batch,
            trace_parent: j.trace_parent.as_deref(),
        });
    }
    insert_rows(c, &values)?;
    let inserted = values
        .iter()
        .map(|v| {
            Ok(Inserted {
                id: v.id,
                state: v.state,
                run_at: row::ms_to_ts(v.run_at)?,
                created_at: row::ms_to_ts(now)?,
            })
        })
        .collect::<StoreResult<Vec<_>>>()?;
    p.rows(inserted)
}

/// Every column of one row of `job/insert.sql`, in its order.
pub(crate) struct JobValues<'a> {
    pub id: i64,
    pub kind: &'a str,
    pub queue: &'a str,
    pub args: &'a str,
    pub priority: i16,
    pub state: JobState,
    pub max_attempts: i32,
    pub run_at: i64,
    pub created_at: i64,
    /// A job inserted claimed: its worker, when it started and when its lease expires.
    pub lease: Option<(&'a str, i64, i64)>,
    pub enqueue_key: Option<&'a str>,
    pub principal: Option<&'a str>,
    pub batch_id: Option<i64>,
    pub follows_job: Option<i64>,
    pub follows_batch: Option<i64>,
    pub trace_parent: Option<&'a str>,
}

/// Writes `rows` with the multi-row `job/insert.sql`, `INSERT_ROWS` per execution and the
/// remainder one at a time.
pub(crate) fn insert_rows(c: &Connection, rows: &[JobValues<'_>]) -> StoreResult<()> {
    for chunk in rows.chunks(INSERT_ROWS) {
        let size = match chunk.len() {
            INSERT_ROWS => INSERT_ROWS,
            _ => 1,
        };
        for part in chunk.chunks(size) {
            let mut stmt = c
                .prepare_cached(insert_sql(part.len()))
                .map_err(interpret_error)?;
            let mut index = 1;
            for v in part {
                let started = i32::from(v.lease.is_some());
                let columns: [&dyn ToSql; 20] = [
                    &v.id,
                    &v.kind,
                    &v.queue,
                    &v.args,
                    &v.priority,
                    &v.state.as_str(),
                    &v.max_attempts,
                    &v.run_at,
                    &v.created_at,
                    &started,
                    &started,
                    &v.lease.map(|l| l.0),
                    &v.lease.map(|l| l.1),
                    &v.lease.map(|l| l.2),
                    &v.enqueue_key,
                    &v.principal,
                    &v.batch_id,
                    &v.follows_job,
                    &v.follows_batch,
                    &v.trace_parent,
                ];
                for column in columns {
                    stmt.raw_bind_parameter(index, column)
                        .map_err(interpret_error)?;
                    index += 1;
                }
            }
            stmt.raw_execute().map_err(interpret_error)?;
        }
    }
    Ok(())
}

/// Whether `queue` is paused (a claimed insert into it goes in unclaimed), read once per
/// queue of an insert and remembered in `known`.
fn known_paused<'q>(
    c: &Connection,
    known: &mut Vec<(&'q str, bool)>,
    queue: &'q str,
) -> StoreResult<bool> {
    if let Some(&(_, paused)) = known.iter().find(|(q, _)| *q == queue) {
        return Ok(paused);
    }
    let paused = c
        .prepare_cached(include_str!("../../queries/queue/is_paused.sql"))
        .and_then(|mut s| s.query_row([queue], |r| r.get(0)))
        .map_err(interpret_error)?;
    known.push((queue, paused));
    Ok(paused)
}

pub(crate) fn claim(c: &Connection, p: &JobClaim) -> StoreResult<Vec<JobRow>> {
    let sql = include_str!("../../queries/job/claim.sql");
    let now = p.now.map(ts_to_ms);
    let kinds = p.kinds.as_ref().map(json_list).transpose()?;
    let args = params![
        p.queue,
        i64::from(p.limit),
        p.worker,
        p.lease_ms,
        now,
        kinds,
        p.principal
    ];
    Ok(sorted(job_rows(c, sql, args)?))
}

pub(crate) fn heartbeat(c: &Connection, p: &JobHeartbeat) -> StoreResult<Vec<LeaseRenewal>> {
    if p.leases.is_empty() {
        return Ok(Vec::new());
    }
    let sql = include_str!("../../queries/job/heartbeat.sql");
    let args = params![json_list(&p.leases)?, p.lease_ms, p.now.map(ts_to_ms)];
    rows(c, sql, args, row::renewal)
}

pub(crate) fn unclaim_paused(
    c: &Connection,
    leases: &[idem_store::LeaseToken],
) -> StoreResult<Vec<i64>> {
    if leases.is_empty() {
        return Ok(Vec::new());
    }
    let sql = include_str!("../../queries/job/unclaim_paused.sql");
    rows(c, sql, params![json_list(&leases)?], |r| {
        r.get(0).map_err(crate::error::interpret_error)
    })
}

pub(crate) fn lock(c: &Connection, p: &JobLock) -> StoreResult<JobRow> {
    let sql = include_str!("../../queries/job/lock.sql");
    #[cfg(feature = "chaos-break-fence")]
    let sql = crate::chaos::unfenced(sql);
    let jobs = job_rows(c, sql, [p.lease.job_id, p.lease.fence])?;
    guarded(jobs, p.lease)
}

/// Completes a job under its fence and records the attempt. `batches: false` leaves a
/// child of a batch alone (`LeaseLost`), for a path that does not count batches.
pub(crate) fn complete(c: &Connection, p: &JobComplete, batches: bool) -> StoreResult<JobRow> {
    let sql = include_str!("../../queries/job/complete.sql");
    #[cfg(feature = "chaos-break-fence")]
    let sql = crate::chaos::unfenced(sql);
    let result = p.result.as_ref().map(json_list).transpose()?;
    let args = params![
        p.lease.job_id,
        p.lease.fence,
        p.now.map(ts_to_ms),
        result,
        batches
    ];
    let changed = c
        .prepare_cached(sql)
        .and_then(|mut s| s.execute(args))
        .map_err(interpret_error)?;
    let job = match changed {
        0 => None,
        _ => get(c, p.lease.job_id)?,
    };
    // The completed attempt is the job's row itself: no attempt row (see
    // job_attempt/list.sql).
    job.ok_or(StoreError::lease_lost(p.lease))
}

/// Completes many jobs, each under its fence, and keeps their results; `batches` as for
/// [`complete`].
pub(crate) fn complete_many(
    c: &Connection,
    p: &JobCompleteMany,
    batches: bool,
) -> StoreResult<Vec<Completed>> {
    if p.leases.is_empty() {
        return Ok(Vec::new());
    }
    let sql = include_str!("../../queries/job/complete_many.sql");
    #[cfg(feature = "chaos-break-fence")]
    let sql = crate::chaos::unfenced(sql);
    let args = params![json_list(&p.leases)?, p.now.map(ts_to_ms), batches];
    let done = rows(c, sql, args, row::completed)?;
    if done.is_empty() {
        return Ok(done);
    }
    if !p.results.is_empty() {
        let ids: Vec<i64> = done.iter().map(|d| d.job_id).collect();
        let completed: std::collections::HashSet<i64> = ids.into_iter().collect();
        let sql = include_str!("../../queries/job/set_result.sql");
        let mut stmt = c.prepare_cached(sql).map_err(interpret_error)?;
        for (id, result) in p.results.iter().filter(|(id, _)| completed.contains(id)) {
            stmt.execute(params![id, json_list(result)?])
                .map_err(interpret_error)?;
        }
    }
    Ok(done)
}

/// Records a failed (or snoozed) attempt under the fence; `batches` as for [`complete`].
pub(crate) fn fail(c: &Connection, p: &JobFail, batches: bool) -> StoreResult<JobRow> {
    let sql = include_str!("../../queries/job/fail.sql");
    let now = p.now.map(ts_to_ms);
    let args = params![
        p.lease.job_id,
        p.lease.fence,
        p.retry_in_ms,
        p.error,
        now,
        p.snooze,
        batches
    ];
    let job = guarded(job_rows(c, sql, args)?, p.lease)?;
    let outcome = AttemptOutcome::of_failure(&job, p.snooze);
    job_attempt::insert(c, AttemptRecord::of(&job, outcome, Some(&p.error), p.now))?;
    Ok(job)
}

pub(crate) fn rescue(c: &Connection, p: &JobRescue) -> StoreResult<Vec<JobRow>> {
    let sql = include_str!("../../queries/job/rescue.sql");
    let now = p.now.map(ts_to_ms);
    let args = params![i64::from(p.limit), p.retry_in_ms, now, p.max_attempts];
    let jobs = sorted(job_rows(c, sql, args)?);
    for job in &jobs {
        let error = job.last_error.as_deref();
        let rec = AttemptRecord::of(job, AttemptOutcome::LeaseExpired, error, p.now);
        job_attempt::insert(c, rec)?;
    }
    Ok(jobs)
}

pub(crate) fn cancel(c: &Connection, p: &JobCancel) -> StoreResult<JobRow> {
    job_attempt::insert(
        c,
        AttemptRecord {
            job_id: p.job_id,
            outcome: AttemptOutcome::Cancelled,
            error: Some("cancelled by an operator while running"),
            now: p.now,
            only_if_state: Some("running"),
        },
    )?;
    let sql = include_str!("../../queries/job/cancel.sql");
    let jobs = job_rows(c, sql, params![p.job_id, p.now.map(ts_to_ms)])?;
    match jobs.into_iter().next() {
        Some(job) => Ok(job),
        None => Err(StoreError::cancel_refused(
            p.job_id,
            get(c, p.job_id)?.as_ref(),
        )),
    }
}

pub(crate) fn delete(c: &Connection, ids: &[i64]) -> StoreResult<u64> {
    let sql = include_str!("../../queries/job/delete.sql");
    let mut stmt = c.prepare_cached(sql).map_err(interpret_error)?;
    let n = stmt.execute([json_list(&ids)?]).map_err(interpret_error)?;
    Ok(n as u64)
}

pub(crate) fn get_many(c: &Connection, ids: &[i64]) -> StoreResult<Vec<JobRow>> {
    let sql = include_str!("../../queries/job/get_many.sql");
    job_rows(c, sql, [json_list(&ids)?])
}

/// Puts dead or cancelled jobs back to available; each with the state it left.
pub(crate) fn retry(c: &Connection, p: &JobRetry) -> StoreResult<Vec<(JobRow, JobState)>> {
    let ids = json_list(&p.ids)?;
    let was: std::collections::HashMap<i64, JobState> = rows(
        c,
        include_str!("../../queries/job/states.sql"),
        [&ids],
        row::job_state,
    )?
    .into_iter()
    .collect();
    let sql = include_str!("../../queries/job/retry.sql");
    let jobs = sorted(job_rows(c, sql, params![ids, p.now.map(ts_to_ms)])?);
    jobs.into_iter()
        .map(|j| {
            let state = was.get(&j.id).copied().ok_or_else(|| {
                StoreError::Database(format!("job {} was retried from no final state", j.id))
            })?;
            Ok((j, state))
        })
        .collect()
}

/// Marks dead job `job_id` as awaiting intent `key`; whether it was dead.
pub(crate) fn await_intent(c: &Connection, job_id: i64, key: &str) -> StoreResult<bool> {
    let sql = include_str!("../../queries/job/await_intent.sql");
    let changed = c
        .prepare_cached(sql)
        .and_then(|mut s| s.execute(params![job_id, key]))
        .map_err(interpret_error)?;
    Ok(changed > 0)
}

/// Puts every dead job awaiting intent `p.key` back to available, in id order.
pub(crate) fn put_back(c: &Connection, p: &JobPutBack) -> StoreResult<Vec<JobRow>> {
    let sql = include_str!("../../queries/job/put_back.sql");
    Ok(sorted(job_rows(
        c,
        sql,
        params![p.key, p.now.map(ts_to_ms)],
    )?))
}

pub(crate) fn discard(c: &Connection, p: &JobDiscard) -> StoreResult<Vec<i64>> {
    let sql = include_str!("../../queries/job/discard.sql");
    let mut gone: Vec<i64> = rows(c, sql, [json_list(&p.ids)?], |r| {
        r.get(0).map_err(interpret_error)
    })?;
    gone.sort_unstable();
    delete_job_records(c, &gone)?;
    Ok(gone)
}

/// Deletes what belongs to jobs just deleted: their attempt history and enqueue keys.
pub(super) fn delete_job_records(c: &Connection, ids: &[i64]) -> StoreResult<()> {
    if ids.is_empty() {
        return Ok(());
    }
    job_attempt::delete(c, ids)?;
    enqueue_key::delete(c, ids)
}
