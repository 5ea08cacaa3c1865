//! Every store operation as one blocking function on a [`Connection`]; the writer thread
//! and the readers run them.
//!
//! Each guarded write names state and fence in its `WHERE` clause; zero rows is
//! `LeaseLost`. The attempt history row is written in the same transaction as the state
//! change it records. Statements come from `queries/`, prepared once per connection
//! (`prepare_cached`), with `?N` placeholders bound by number.

use idem_store::{
    AttemptOutcome, AttemptRow, CounterAssigned, CounterNext, EffectClaim, EffectClaimed,
    EnqueueKeyTake, JobCancel, JobClaim, JobComplete, JobCompleteMany, JobDiscard, JobFail,
    JobHeartbeat, JobInsert, JobList, JobLock, JobRescue, JobRetry, JobRow, LeaseRenewal,
    LeaseToken, LedgerMismatch, LedgerPost, LedgerPosted, Purge, PurgeTarget, QueueCount,
    StoreError, StoreResult, Timestamp,
};
use rusqlite::{Connection, Params, Row, params};

use crate::error::interpret_error;
use crate::row::{self, ts_to_ms};

/// Runs `op` in its own `BEGIN IMMEDIATE` transaction: committed if it succeeds, rolled
/// back if anything fails.
pub(crate) fn in_tx<R>(
    c: &Connection,
    op: impl FnOnce(&Connection) -> StoreResult<R>,
) -> StoreResult<R> {
    begin(c)?;
    match op(c).and_then(|out| commit(c).map(|()| out)) {
        Ok(out) => Ok(out),
        Err(e) => {
            rollback(c);
            Err(e)
        }
    }
}

/// `BEGIN IMMEDIATE`, after rolling back any transaction left open by a caller that went
/// away (the writer is exclusive to whoever begins, so an open one is an orphan).
pub(crate) fn begin(c: &Connection) -> StoreResult<()> {
    rollback(c);
    exec(c, "BEGIN IMMEDIATE", [])
}

/// `COMMIT`; on failure the transaction is rolled back.
pub(crate) fn commit(c: &Connection) -> StoreResult<()> {
    exec(c, "COMMIT", []).inspect_err(|_| rollback(c))
}

/// Rolls back the open transaction, if any. A failed rollback leaves nothing to do: SQLite
/// ends the transaction anyway.
pub(crate) fn rollback(c: &Connection) {
    if !c.is_autocommit()
        && let Err(e) = exec(c, "ROLLBACK", [])
    {
        tracing::warn!(error = %e, "SQLite rollback failed");
    }
}

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

/// A job returned by a guarded statement, or `LeaseLost` when it returned none.
fn guarded(jobs: Vec<JobRow>, lease: LeaseToken) -> StoreResult<JobRow> {
    jobs.into_iter().next().ok_or(StoreError::lease_lost(lease))
}

fn sorted(mut jobs: Vec<JobRow>) -> Vec<JobRow> {
    jobs.sort_by_key(|j| j.id);
    jobs
}

/// A list as the JSON text the statements unpack with `json_each`.
fn json_list<T: serde::Serialize>(items: &T) -> StoreResult<String> {
    serde_json::to_string(items)
        .map_err(|e| StoreError::Invalid(format!("cannot encode a list for a statement: {e}")))
}

/// The database clock.
pub(crate) fn now(c: &Connection) -> StoreResult<i64> {
    let mut ms = rows(c, include_str!("../queries/clock/now.sql"), [], |r| {
        r.get(0).map_err(interpret_error)
    })?;
    ms.pop()
        .ok_or_else(|| StoreError::Database("the clock query returned no row".into()))
}

pub(crate) fn job_get(c: &Connection, id: i64) -> StoreResult<Option<JobRow>> {
    let jobs = rows(c, include_str!("../queries/job/get.sql"), [id], row::job)?;
    Ok(jobs.into_iter().next())
}

pub(crate) fn job_list(c: &Connection, p: &JobList) -> StoreResult<Vec<JobRow>> {
    let sql = include_str!("../queries/job/list.sql");
    let state = p.state.map(|s| s.as_str());
    let args = params![state, p.queue, p.kind, p.before_id, i64::from(p.limit)];
    rows(c, sql, args, row::job)
}

pub(crate) fn job_attempts(c: &Connection, job_id: i64) -> StoreResult<Vec<AttemptRow>> {
    let sql = include_str!("../queries/job_attempt/list.sql");
    rows(c, sql, [job_id], row::attempt)
}

pub(crate) fn queue_counts(c: &Connection) -> StoreResult<Vec<QueueCount>> {
    let sql = include_str!("../queries/queue/counts.sql");
    rows(c, sql, [], row::queue_count)
}

/// The batch as the one JSON array `job/insert.sql` unpacks: `{kind, queue, args,
/// priority, run_at (ms), max_attempts}`, plus `claim_worker` and `lease_ms` for a job
/// inserted claimed.
fn insert_json(p: &JobInsert) -> StoreResult<String> {
    #[derive(serde::Serialize)]
    struct Item<'a> {
        kind: &'a str,
        queue: &'a str,
        args: &'a serde_json::Value,
        priority: i16,
        run_at: Option<i64>,
        max_attempts: i32,
        #[serde(skip_serializing_if = "Option::is_none")]
        claim_worker: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        lease_ms: Option<i64>,
    }
    let items: Vec<Item<'_>> = p
        .jobs
        .iter()
        .map(|j| Item {
            kind: &j.kind,
            queue: &j.queue,
            args: &j.args,
            priority: j.priority,
            run_at: j.run_at.map(ts_to_ms),
            max_attempts: j.max_attempts,
            claim_worker: j.claim.as_ref().map(|c| c.worker.as_str()),
            lease_ms: j.claim.as_ref().map(|c| c.lease_ms),
        })
        .collect();
    json_list(&items)
}

pub(crate) fn job_insert_rows(c: &Connection, p: JobInsert) -> StoreResult<Vec<JobRow>> {
    if p.jobs.is_empty() {
        return Ok(Vec::new());
    }
    let sql = include_str!("../queries/job/insert.sql");
    let args = params![insert_json(&p)?, p.now.map(ts_to_ms)];
    let inserted = rows(c, sql, args, row::inserted)?;
    p.rows(inserted)
}

pub(crate) fn job_claim(c: &Connection, p: &JobClaim) -> StoreResult<Vec<JobRow>> {
    let sql = include_str!("../queries/job/claim.sql");
    let now = p.now.map(ts_to_ms);
    let args = params![p.queue, i64::from(p.limit), p.worker, p.lease_ms, now];
    Ok(sorted(rows(c, sql, args, row::job)?))
}

pub(crate) fn job_heartbeat(c: &Connection, p: &JobHeartbeat) -> StoreResult<Vec<LeaseRenewal>> {
    if p.leases.is_empty() {
        return Ok(Vec::new());
    }
    let sql = include_str!("../queries/job/heartbeat.sql");
    let args = params![json_list(&p.leases)?, p.lease_ms, p.now.map(ts_to_ms)];
    rows(c, sql, args, row::renewal)
}

pub(crate) fn job_lock(c: &Connection, p: &JobLock) -> StoreResult<JobRow> {
    let sql = include_str!("../queries/job/lock.sql");
    let jobs = rows(c, sql, [p.lease.job_id, p.lease.fence], row::job)?;
    guarded(jobs, p.lease)
}

pub(crate) fn job_complete(c: &Connection, p: &JobComplete) -> StoreResult<JobRow> {
    let sql = include_str!("../queries/job/complete.sql");
    let args = params![p.lease.job_id, p.lease.fence, p.now.map(ts_to_ms)];
    let job = guarded(rows(c, sql, args, row::job)?, p.lease)?;
    record_attempt(
        c,
        AttemptRecord::of(&job, AttemptOutcome::Completed, None, p.now),
    )?;
    Ok(job)
}

pub(crate) fn job_complete_many(c: &Connection, p: &JobCompleteMany) -> StoreResult<Vec<i64>> {
    if p.leases.is_empty() {
        return Ok(Vec::new());
    }
    let sql = include_str!("../queries/job/complete_many.sql");
    let args = params![json_list(&p.leases)?, p.now.map(ts_to_ms)];
    let ids: Vec<i64> = rows(c, sql, args, |r| r.get(0).map_err(interpret_error))?;
    if !ids.is_empty() {
        let sql = include_str!("../queries/job_attempt/insert_completed.sql");
        exec(c, sql, [json_list(&ids)?])?;
    }
    Ok(ids)
}

pub(crate) fn job_fail(c: &Connection, p: &JobFail) -> StoreResult<JobRow> {
    let sql = include_str!("../queries/job/fail.sql");
    let now = p.now.map(ts_to_ms);
    let args = params![
        p.lease.job_id,
        p.lease.fence,
        p.retry_in_ms,
        p.error,
        now,
        p.snooze
    ];
    let job = guarded(rows(c, sql, args, row::job)?, p.lease)?;
    let outcome = AttemptOutcome::of_failure(&job, p.snooze);
    record_attempt(c, AttemptRecord::of(&job, outcome, Some(&p.error), p.now))?;
    Ok(job)
}

pub(crate) fn job_rescue(c: &Connection, p: &JobRescue) -> StoreResult<Vec<JobRow>> {
    let sql = include_str!("../queries/job/rescue.sql");
    let now = p.now.map(ts_to_ms);
    let args = params![i64::from(p.limit), p.retry_in_ms, now, p.max_attempts];
    let jobs = sorted(rows(c, sql, args, row::job)?);
    for job in &jobs {
        let error = job.last_error.as_deref();
        let rec = AttemptRecord::of(job, AttemptOutcome::LeaseExpired, error, p.now);
        record_attempt(c, rec)?;
    }
    Ok(jobs)
}

pub(crate) fn job_cancel(c: &Connection, p: &JobCancel) -> StoreResult<JobRow> {
    record_attempt(
        c,
        AttemptRecord {
            job_id: p.job_id,
            outcome: AttemptOutcome::Cancelled,
            error: Some("cancelled by an operator while running"),
            now: p.now,
            only_if_state: Some("running"),
        },
    )?;
    let sql = include_str!("../queries/job/cancel.sql");
    let jobs = rows(c, sql, params![p.job_id, p.now.map(ts_to_ms)], row::job)?;
    match jobs.into_iter().next() {
        Some(job) => Ok(job),
        None => Err(StoreError::cancel_refused(
            p.job_id,
            job_get(c, p.job_id)?.as_ref(),
        )),
    }
}

/// One attempt-history row to write for a job's current claim.
struct AttemptRecord<'a> {
    job_id: i64,
    outcome: AttemptOutcome,
    error: Option<&'a str>,
    now: Option<Timestamp>,
    only_if_state: Option<&'static str>,
}

impl<'a> AttemptRecord<'a> {
    fn of(
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

fn record_attempt(c: &Connection, rec: AttemptRecord<'_>) -> StoreResult<()> {
    let sql = include_str!("../queries/job_attempt/insert.sql");
    let now = rec.now.map(ts_to_ms);
    let state = rec.only_if_state;
    let args = params![rec.job_id, rec.outcome.as_str(), rec.error, now, state];
    exec(c, sql, args)
}

pub(crate) fn effect_claim(c: &Connection, p: &EffectClaim) -> StoreResult<EffectClaimed> {
    let sql = include_str!("../queries/effect/claim.sql");
    let args = params![
        p.key,
        p.kind,
        p.lease.job_id,
        p.lease.fence,
        p.now.map(ts_to_ms)
    ];
    if !rows(c, sql, args, |r| {
        r.get::<_, String>(0).map_err(interpret_error)
    })?
    .is_empty()
    {
        return Ok(EffectClaimed::New);
    }
    let sql = include_str!("../queries/effect/get.sql");
    existing(c, sql, &p.key, p.lease, row::effect).map(EffectClaimed::Done)
}

pub(crate) fn ledger_post(c: &Connection, p: &LedgerPost) -> StoreResult<LedgerPosted> {
    let sql = include_str!("../queries/ledger/post_entry.sql");
    let now = p.now.map(ts_to_ms);
    let args = params![
        p.entry_key,
        p.account,
        p.amount,
        p.lease.job_id,
        p.lease.fence,
        now
    ];
    if !rows(c, sql, args, |r| {
        r.get::<_, String>(0).map_err(interpret_error)
    })?
    .is_empty()
    {
        let sql = include_str!("../queries/ledger/move_balance.sql");
        c.prepare_cached(sql)
            .and_then(|mut s| s.execute(params![p.account, p.amount, now]))
            .map_err(interpret_error)?;
        return Ok(LedgerPosted::New);
    }
    let sql = include_str!("../queries/ledger/get_entry.sql");
    existing(c, sql, &p.entry_key, p.lease, row::ledger_entry).map(LedgerPosted::Duplicate)
}

pub(crate) fn ledger_verify(c: &Connection) -> StoreResult<Vec<LedgerMismatch>> {
    rows(
        c,
        include_str!("../queries/ledger/verify.sql"),
        [],
        row::ledger_mismatch,
    )
}

pub(crate) fn ledger_rebuild(c: &Connection, accounts: &[LedgerMismatch]) -> StoreResult<()> {
    let mut stmt = c
        .prepare_cached(include_str!("../queries/ledger/set_balance.sql"))
        .map_err(interpret_error)?;
    for a in accounts {
        stmt.execute(params![a.account]).map_err(interpret_error)?;
    }
    Ok(())
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

pub(crate) fn counter_next(c: &Connection, p: &CounterNext) -> StoreResult<CounterAssigned> {
    let one = |r: &Row<'_>| r.get::<_, i64>(0).map_err(interpret_error);
    rows(
        c,
        include_str!("../queries/counter/lock.sql"),
        [&p.counter],
        one,
    )?;
    let find = include_str!("../queries/counter/find.sql");
    if let Some(number) = rows(c, find, [&p.key, &p.counter], one)?.pop() {
        return Ok(CounterAssigned { number, new: false });
    }
    let bump = include_str!("../queries/counter/bump.sql");
    let args = params![p.counter, p.lease.job_id, p.lease.fence];
    let Some(number) = rows(c, bump, args, one)?.pop() else {
        return Err(StoreError::lease_lost(p.lease));
    };
    let assign = include_str!("../queries/counter/assign.sql");
    let args = params![
        p.counter,
        p.key,
        number,
        p.lease.job_id,
        p.now.map(ts_to_ms)
    ];
    c.prepare_cached(assign)
        .and_then(|mut s| s.execute(args))
        .map_err(interpret_error)?;
    Ok(CounterAssigned { number, new: true })
}

pub(crate) fn effect_others(c: &Connection, p: &EffectClaim) -> StoreResult<Vec<String>> {
    let sql = include_str!("../queries/effect/others.sql");
    let args = params![p.lease.job_id, p.kind, p.key];
    rows(c, sql, args, |r| {
        r.get::<_, String>(0).map_err(interpret_error)
    })
}

pub(crate) fn enqueue_key_take(c: &Connection, p: &EnqueueKeyTake) -> StoreResult<Vec<i64>> {
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
    let sql = include_str!("../queries/enqueue_key/take.sql");
    let args = params![json_list(&keys)?, p.window_ms, p.now.map(ts_to_ms)];
    rows(c, sql, args, |r| r.get(0).map_err(interpret_error))
}

pub(crate) fn enqueue_key_find(
    c: &Connection,
    keys: &[(String, String)],
) -> StoreResult<Vec<(String, String, i64)>> {
    let keys: Vec<serde_json::Value> = keys
        .iter()
        .map(|(queue, key)| serde_json::json!({ "queue": queue, "key": key }))
        .collect();
    let sql = include_str!("../queries/enqueue_key/find.sql");
    rows(c, sql, [json_list(&keys)?], |r| {
        Ok((
            r.get(0).map_err(interpret_error)?,
            r.get(1).map_err(interpret_error)?,
            r.get(2).map_err(interpret_error)?,
        ))
    })
}

pub(crate) fn job_delete(c: &Connection, ids: &[i64]) -> StoreResult<u64> {
    let sql = include_str!("../queries/job/delete.sql");
    let mut stmt = c.prepare_cached(sql).map_err(interpret_error)?;
    let n = stmt.execute([json_list(&ids)?]).map_err(interpret_error)?;
    Ok(n as u64)
}

pub(crate) fn job_get_many(c: &Connection, ids: &[i64]) -> StoreResult<Vec<JobRow>> {
    let sql = include_str!("../queries/job/get_many.sql");
    rows(c, sql, [json_list(&ids)?], row::job)
}

pub(crate) fn job_retry(c: &Connection, p: &JobRetry) -> StoreResult<Vec<JobRow>> {
    let sql = include_str!("../queries/job/retry.sql");
    let args = params![json_list(&p.ids)?, p.now.map(ts_to_ms)];
    Ok(sorted(rows(c, sql, args, row::job)?))
}

pub(crate) fn job_discard(c: &Connection, p: &JobDiscard) -> StoreResult<Vec<i64>> {
    let sql = include_str!("../queries/job/discard.sql");
    let mut gone: Vec<i64> = rows(c, sql, [json_list(&p.ids)?], |r| {
        r.get(0).map_err(interpret_error)
    })?;
    gone.sort_unstable();
    delete_job_records(c, &gone)?;
    Ok(gone)
}

/// Deletes what belongs to jobs just deleted: their attempt history and enqueue keys.
fn delete_job_records(c: &Connection, ids: &[i64]) -> StoreResult<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let ids = json_list(&ids)?;
    exec(c, include_str!("../queries/job_attempt/delete.sql"), [&ids])?;
    exec(c, include_str!("../queries/enqueue_key/delete.sql"), [&ids])
}

/// The job states a purge of `target` deletes, as the JSON list the statements take.
fn purged_states(target: PurgeTarget) -> &'static str {
    match target {
        PurgeTarget::DeadJobs => r#"["dead"]"#,
        _ => r#"["completed","cancelled"]"#,
    }
}

pub(crate) fn purge(c: &Connection, p: &Purge) -> StoreResult<u64> {
    let before = ts_to_ms(p.before);
    let limit = i64::from(p.limit);
    let keys = |sql: &str| -> StoreResult<u64> {
        let mut stmt = c.prepare_cached(sql).map_err(interpret_error)?;
        let n = stmt
            .execute(params![before, limit])
            .map_err(interpret_error)?;
        Ok(n as u64)
    };
    match p.target {
        PurgeTarget::EnqueueKeys => keys(include_str!("../queries/purge/enqueue_keys.sql")),
        PurgeTarget::EffectKeys => keys(include_str!("../queries/purge/effect_keys.sql")),
        PurgeTarget::FinishedJobs | PurgeTarget::DeadJobs => {
            let sql = include_str!("../queries/purge/jobs.sql");
            let args = params![before, limit, purged_states(p.target)];
            let gone: Vec<i64> = rows(c, sql, args, |r| r.get(0).map_err(interpret_error))?;
            delete_job_records(c, &gone)?;
            Ok(gone.len() as u64)
        }
    }
}

pub(crate) fn purge_count(c: &Connection, target: PurgeTarget, before: i64) -> StoreResult<u64> {
    let count = |sql: &str, args: &[&dyn rusqlite::ToSql]| -> StoreResult<u64> {
        let n: Vec<i64> = rows(c, sql, args, |r| r.get(0).map_err(interpret_error))?;
        Ok(n.first().copied().unwrap_or(0) as u64)
    };
    match target {
        PurgeTarget::EnqueueKeys => count(
            include_str!("../queries/purge/count_enqueue_keys.sql"),
            &[&before],
        ),
        PurgeTarget::EffectKeys => count(
            include_str!("../queries/purge/count_effect_keys.sql"),
            &[&before],
        ),
        PurgeTarget::FinishedJobs | PurgeTarget::DeadJobs => count(
            include_str!("../queries/purge/count_jobs.sql"),
            &[&before, &purged_states(target)],
        ),
    }
}
