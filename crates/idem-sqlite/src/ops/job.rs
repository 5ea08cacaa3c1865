//! The job operations (`queries/job/`): insert, claim, heartbeat, lock, the fenced
//! finishes (complete, complete-many, fail), rescue, cancel, the dead-letter retry and
//! discard, and reads by id or filter.
//!
//! Complete, complete-many, fail, rescue and cancel write their attempt rows
//! (`job_attempt`) after the update, in the same transaction; a job deleted by discard
//! takes its attempt history and enqueue key with it.

use idem_store::{
    AttemptOutcome, Completed, JobCancel, JobClaim, JobComplete, JobCompleteMany, JobDiscard,
    JobFail, JobHeartbeat, JobInsert, JobList, JobLock, JobRescue, JobRetry, JobRow, JobState,
    LeaseRenewal, StoreError, StoreResult,
};
use rusqlite::{Connection, params};

use super::job_attempt::{self, AttemptRecord};
use super::{enqueue_key, guarded, json_list, rows};
use crate::error::interpret_error;
use crate::row::{self, ts_to_ms};

fn sorted(mut jobs: Vec<JobRow>) -> Vec<JobRow> {
    jobs.sort_by_key(|j| j.id);
    jobs
}

pub(crate) fn get(c: &Connection, id: i64) -> StoreResult<Option<JobRow>> {
    let jobs = rows(c, include_str!("../../queries/job/get.sql"), [id], row::job)?;
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
    rows(c, sql, args, row::job)
}

/// Inserts the batch's jobs in order, one execution of the prepared `job/insert.sql`
/// each, all with one reading of the clock.
pub(crate) fn insert(c: &Connection, p: JobInsert) -> StoreResult<Vec<JobRow>> {
    if p.jobs.is_empty() {
        return Ok(Vec::new());
    }
    let now = match p.now {
        Some(now) => ts_to_ms(now),
        None => super::clock::now(c)?,
    };
    let mut stmt = c
        .prepare_cached(include_str!("../../queries/job/insert.sql"))
        .map_err(interpret_error)?;
    let mut inserted = Vec::with_capacity(p.jobs.len());
    for j in &p.jobs {
        let args = serde_json::to_string(&j.args)
            .map_err(|e| StoreError::Invalid(format!("cannot encode a job's args: {e}")))?;
        let claim = j.claim.as_ref();
        let row = stmt
            .query_row(
                params![
                    j.kind,
                    j.queue,
                    args,
                    j.priority,
                    j.run_at.map(ts_to_ms),
                    j.max_attempts,
                    claim.map(|c| c.worker.as_str()),
                    claim.map(|c| c.lease_ms),
                    j.enqueue_key,
                    j.principal,
                    j.batch_id,
                    j.follows_job,
                    j.follows_batch,
                    j.trace_parent,
                    now,
                ],
                |r| Ok(row::inserted(r)),
            )
            .map_err(interpret_error)??;
        inserted.push(row);
    }
    p.rows(inserted)
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
    Ok(sorted(rows(c, sql, args, row::job)?))
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
    let jobs = rows(c, sql, [p.lease.job_id, p.lease.fence], row::job)?;
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
    let job = guarded(rows(c, sql, args, row::job)?, p.lease)?;
    job_attempt::insert(
        c,
        AttemptRecord::of(&job, AttemptOutcome::Completed, None, p.now),
    )?;
    Ok(job)
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
    let ids: Vec<i64> = done.iter().map(|d| d.job_id).collect();
    job_attempt::insert_completed(c, &ids)?;
    if !p.results.is_empty() {
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
    let job = guarded(rows(c, sql, args, row::job)?, p.lease)?;
    let outcome = AttemptOutcome::of_failure(&job, p.snooze);
    job_attempt::insert(c, AttemptRecord::of(&job, outcome, Some(&p.error), p.now))?;
    Ok(job)
}

pub(crate) fn rescue(c: &Connection, p: &JobRescue) -> StoreResult<Vec<JobRow>> {
    let sql = include_str!("../../queries/job/rescue.sql");
    let now = p.now.map(ts_to_ms);
    let args = params![i64::from(p.limit), p.retry_in_ms, now, p.max_attempts];
    let jobs = sorted(rows(c, sql, args, row::job)?);
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
    let jobs = rows(c, sql, params![p.job_id, p.now.map(ts_to_ms)], row::job)?;
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
    rows(c, sql, [json_list(&ids)?], row::job)
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
    let jobs = sorted(rows(c, sql, params![ids, p.now.map(ts_to_ms)], row::job)?);
    jobs.into_iter()
        .map(|j| {
            let state = was.get(&j.id).copied().ok_or_else(|| {
                StoreError::Database(format!("job {} was retried from no final state", j.id))
            })?;
            Ok((j, state))
        })
        .collect()
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
