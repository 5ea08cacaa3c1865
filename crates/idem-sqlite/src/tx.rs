//! [`SqliteTx`]: one `BEGIN IMMEDIATE` transaction on the single write connection, and
//! every transactional job operation.
//!
//! Each guarded write names state and fence in its `WHERE` clause; zero rows is
//! `LeaseLost`. The attempt history row is written in the same transaction as the state
//! change it records.

use std::any::Any;

use async_trait::async_trait;
use idem_store::{
    AttemptOutcome, Backend, JobCancel, JobClaim, JobComplete, JobCompleteMany, JobFail,
    JobHeartbeat, JobInsert, JobLock, JobRescue, JobRow, LeaseRenewal, LeaseToken, SqlValue,
    StoreError, StoreResult, StoreTx, Timestamp,
};
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, Sqlite, SqlitePool, Transaction};

use crate::error::interpret_error;
use crate::row::{self, ms_to_ts, ts_to_ms};
use crate::value;

/// An open write transaction on an SQLite store.
pub struct SqliteTx {
    tx: Transaction<'static, Sqlite>,
}

impl SqliteTx {
    pub(crate) async fn begin(pool: &SqlitePool) -> StoreResult<Self> {
        let tx = pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(interpret_error)?;
        Ok(SqliteTx { tx })
    }

    /// The sqlx transaction, for a caller's own statements with sqlx's API.
    pub fn inner(&mut self) -> &mut Transaction<'static, Sqlite> {
        &mut self.tx
    }

    async fn fetch_jobs(&mut self, q: Query) -> StoreResult<Vec<JobRow>> {
        let rows = q.fetch_all(&mut *self.tx).await.map_err(interpret_error)?;
        let mut jobs = rows.iter().map(row::job).collect::<StoreResult<Vec<_>>>()?;
        jobs.sort_by_key(|j| j.id);
        Ok(jobs)
    }

    async fn fetch_guarded(&mut self, q: Query, lease: LeaseToken) -> StoreResult<JobRow> {
        let row: Option<SqliteRow> = q
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(interpret_error)?;
        match row {
            Some(r) => row::job(&r),
            None => Err(StoreError::LeaseLost {
                job_id: lease.job_id,
                fence: lease.fence,
            }),
        }
    }

    async fn record_attempt(&mut self, rec: AttemptRecord<'_>) -> StoreResult<()> {
        sqlx::query(include_str!("../queries/job_attempt/insert.sql"))
            .bind(rec.job_id)
            .bind(rec.outcome.as_str())
            .bind(rec.error)
            .bind(rec.now.map(ts_to_ms))
            .bind(rec.only_if_state)
            .execute(&mut *self.tx)
            .await
            .map_err(interpret_error)?;
        Ok(())
    }
}

type Query = sqlx::query::Query<'static, Sqlite, sqlx::sqlite::SqliteArguments>;

/// One attempt-history row to write for a job's current claim.
struct AttemptRecord<'a> {
    job_id: i64,
    outcome: AttemptOutcome,
    error: Option<&'a str>,
    now: Option<Timestamp>,
    only_if_state: Option<&'static str>,
}

#[async_trait]
impl StoreTx for SqliteTx {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    async fn commit(self: Box<Self>) -> StoreResult<()> {
        self.tx.commit().await.map_err(interpret_error)
    }

    async fn rollback(self: Box<Self>) -> StoreResult<()> {
        self.tx.rollback().await.map_err(interpret_error)
    }

    async fn job_insert(&mut self, p: JobInsert) -> StoreResult<Vec<JobRow>> {
        if p.jobs.is_empty() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(include_str!("../queries/job/insert.sql"))
            .bind(p.to_json(ts_to_ms))
            .bind(p.now.map(ts_to_ms))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(interpret_error)?;
        let inserted = rows.iter().map(row::inserted).collect::<StoreResult<_>>()?;
        p.rows(inserted)
    }

    async fn job_claim(&mut self, p: JobClaim) -> StoreResult<Vec<JobRow>> {
        let q = sqlx::query(include_str!("../queries/job/claim.sql"))
            .bind(p.queue)
            .bind(i64::from(p.limit))
            .bind(p.worker)
            .bind(p.lease_ms)
            .bind(p.now.map(ts_to_ms));
        self.fetch_jobs(q).await
    }

    async fn job_heartbeat(&mut self, p: JobHeartbeat) -> StoreResult<Vec<LeaseRenewal>> {
        if p.leases.is_empty() {
            return Ok(Vec::new());
        }
        let leases = serde_json::to_string(&p.leases)
            .map_err(|e| StoreError::Invalid(format!("cannot encode leases: {e}")))?;
        let rows = sqlx::query(include_str!("../queries/job/heartbeat.sql"))
            .bind(leases)
            .bind(p.lease_ms)
            .bind(p.now.map(ts_to_ms))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(interpret_error)?;
        rows.iter().map(renewal).collect()
    }

    async fn job_lock(&mut self, p: JobLock) -> StoreResult<JobRow> {
        let q = sqlx::query(include_str!("../queries/job/lock.sql"))
            .bind(p.lease.job_id)
            .bind(p.lease.fence);
        self.fetch_guarded(q, p.lease).await
    }

    async fn job_complete(&mut self, p: JobComplete) -> StoreResult<JobRow> {
        let q = sqlx::query(include_str!("../queries/job/complete.sql"))
            .bind(p.lease.job_id)
            .bind(p.lease.fence)
            .bind(p.now.map(ts_to_ms));
        let job = self.fetch_guarded(q, p.lease).await?;
        self.record_attempt(AttemptRecord {
            job_id: job.id,
            outcome: AttemptOutcome::Completed,
            error: None,
            now: p.now,
            only_if_state: None,
        })
        .await?;
        Ok(job)
    }

    async fn job_complete_many(&mut self, p: JobCompleteMany) -> StoreResult<Vec<i64>> {
        if p.leases.is_empty() {
            return Ok(Vec::new());
        }
        let leases = serde_json::to_string(&p.leases)
            .map_err(|e| StoreError::Invalid(format!("cannot encode leases: {e}")))?;
        let ids: Vec<i64> = sqlx::query_scalar(include_str!("../queries/job/complete_many.sql"))
            .bind(leases)
            .bind(p.now.map(ts_to_ms))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(interpret_error)?;
        if !ids.is_empty() {
            let json = serde_json::Value::from(ids.clone()).to_string();
            sqlx::query(include_str!("../queries/job_attempt/insert_completed.sql"))
                .bind(json)
                .execute(&mut *self.tx)
                .await
                .map_err(interpret_error)?;
        }
        Ok(ids)
    }

    async fn job_fail(&mut self, p: JobFail) -> StoreResult<JobRow> {
        let q = sqlx::query(include_str!("../queries/job/fail.sql"))
            .bind(p.lease.job_id)
            .bind(p.lease.fence)
            .bind(p.retry_in_ms)
            .bind(p.error.clone())
            .bind(p.now.map(ts_to_ms));
        let job = self.fetch_guarded(q, p.lease).await?;
        self.record_attempt(AttemptRecord {
            job_id: job.id,
            outcome: AttemptOutcome::of_failure(&job),
            error: Some(&p.error),
            now: p.now,
            only_if_state: None,
        })
        .await?;
        Ok(job)
    }

    async fn job_rescue(&mut self, p: JobRescue) -> StoreResult<Vec<JobRow>> {
        let q = sqlx::query(include_str!("../queries/job/rescue.sql"))
            .bind(i64::from(p.limit))
            .bind(p.retry_in_ms)
            .bind(p.now.map(ts_to_ms));
        let jobs = self.fetch_jobs(q).await?;
        for job in &jobs {
            self.record_attempt(AttemptRecord {
                job_id: job.id,
                outcome: AttemptOutcome::LeaseExpired,
                error: job.last_error.as_deref(),
                now: p.now,
                only_if_state: None,
            })
            .await?;
        }
        Ok(jobs)
    }

    async fn job_cancel(&mut self, p: JobCancel) -> StoreResult<JobRow> {
        self.record_attempt(AttemptRecord {
            job_id: p.job_id,
            outcome: AttemptOutcome::Cancelled,
            error: Some("cancelled by an operator while running"),
            now: p.now,
            only_if_state: Some("running"),
        })
        .await?;
        let row = sqlx::query(include_str!("../queries/job/cancel.sql"))
            .bind(p.job_id)
            .bind(p.now.map(ts_to_ms))
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(interpret_error)?;
        match row {
            Some(r) => row::job(&r),
            None => Err(cancel_refusal(self, p.job_id).await),
        }
    }

    async fn execute(&mut self, sql: &str, args: &[SqlValue]) -> StoreResult<u64> {
        let q = value::bind_all(sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())), args)?;
        let done = q.execute(&mut *self.tx).await.map_err(interpret_error)?;
        Ok(done.rows_affected())
    }

    async fn query(&mut self, sql: &str, args: &[SqlValue]) -> StoreResult<Vec<Vec<SqlValue>>> {
        let q = value::bind_all(sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())), args)?;
        let rows = q.fetch_all(&mut *self.tx).await.map_err(interpret_error)?;
        rows.iter().map(value::decode_row).collect()
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

fn renewal(r: &SqliteRow) -> StoreResult<LeaseRenewal> {
    Ok(LeaseRenewal {
        job_id: r.try_get("id").map_err(interpret_error)?,
        fence: r.try_get("fence").map_err(interpret_error)?,
        lease_expires_at: ms_to_ts(r.try_get("lease_expires_at").map_err(interpret_error)?)?,
    })
}

/// Why a cancel changed nothing: the job is missing or already finished.
async fn cancel_refusal(tx: &mut SqliteTx, job_id: i64) -> StoreError {
    let found = sqlx::query(include_str!("../queries/job/get.sql"))
        .bind(job_id)
        .fetch_optional(&mut *tx.tx)
        .await;
    match found {
        Ok(Some(r)) => match row::job(&r) {
            Ok(job) => StoreError::cancel_refused(job_id, Some(&job)),
            Err(e) => e,
        },
        Ok(None) => StoreError::cancel_refused(job_id, None),
        Err(e) => interpret_error(e),
    }
}
