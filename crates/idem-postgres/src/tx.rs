//! [`PgTx`]: one PostgreSQL transaction (READ COMMITTED) on a pooled connection, and every
//! transactional job operation.
//!
//! Each guarded write names state and fence in its `WHERE` clause; zero rows is
//! `LeaseLost`. The attempt history row is written in the same transaction as the state
//! change it records. Where SQLite relies on its single writer, this store relies on row
//! locks: claims and rescues take `FOR UPDATE SKIP LOCKED`, an effect transaction holds its
//! job's row from `job_lock` to commit, and READ COMMITTED re-checks a guarded `WHERE`
//! against the latest committed row before writing it.

use std::any::Any;

use async_trait::async_trait;
use idem_store::{
    AttemptOutcome, Backend, CounterAssigned, CounterNext, EffectClaim, EffectClaimed,
    EnqueueKeyTake, JobCancel, JobClaim, JobComplete, JobCompleteMany, JobDiscard, JobFail,
    JobHeartbeat, JobInsert, JobLock, JobRescue, JobRetry, JobRow, LeaseRenewal, LeaseToken,
    LedgerMismatch, LedgerPost, LedgerPosted, Purge, SqlValue, StoreError, StoreResult, StoreTx,
};
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::{PgPool, Postgres, Transaction};

use crate::error::interpret_error;
use crate::maintenance;
use crate::row;
use crate::single;
use crate::value;

/// An open transaction on a PostgreSQL store.
pub struct PgTx {
    tx: Transaction<'static, Postgres>,
}

impl PgTx {
    pub(crate) async fn begin(pool: &PgPool) -> StoreResult<Self> {
        let tx = pool.begin().await.map_err(interpret_error)?;
        Ok(PgTx { tx })
    }

    /// The sqlx transaction, for a caller's own statements with sqlx's API.
    pub fn inner(&mut self) -> &mut Transaction<'static, Postgres> {
        &mut self.tx
    }

    /// The row a guarded statement returned, or `LeaseLost` when it returned none (its
    /// state-and-fence guard refused the claim).
    async fn fetch_guarded<T>(
        &mut self,
        q: Query,
        lease: LeaseToken,
        decode: fn(&PgRow) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let row: Option<PgRow> = q
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(interpret_error)?;
        match row {
            Some(r) => decode(&r),
            None => Err(StoreError::lease_lost(lease)),
        }
    }

    /// The record under `key` that a guarded insert found taken; none means the insert's
    /// fence guard refused it, so the claim is not current.
    async fn existing<T>(
        &mut self,
        sql: &'static str,
        key: &str,
        lease: LeaseToken,
        decode: fn(&PgRow) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let q = sqlx::query(sql).bind(key.to_owned());
        self.fetch_guarded(q, lease, decode).await
    }
}

type Query = sqlx::query::Query<'static, Postgres, PgArguments>;

#[async_trait]
impl StoreTx for PgTx {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    async fn commit(self: Box<Self>) -> StoreResult<()> {
        self.tx.commit().await.map_err(interpret_error)
    }

    async fn rollback(self: Box<Self>) -> StoreResult<()> {
        self.tx.rollback().await.map_err(interpret_error)
    }

    async fn job_insert_rows(&mut self, p: JobInsert) -> StoreResult<Vec<JobRow>> {
        single::job_insert(&mut *self.tx, p).await
    }

    async fn enqueue_key_take(&mut self, p: EnqueueKeyTake) -> StoreResult<Vec<i64>> {
        maintenance::enqueue_key_take(&mut *self.tx, p).await
    }

    async fn enqueue_key_find(
        &mut self,
        keys: Vec<(String, String)>,
    ) -> StoreResult<Vec<(String, String, i64)>> {
        maintenance::enqueue_key_find(&mut *self.tx, keys).await
    }

    async fn job_delete(&mut self, ids: Vec<i64>) -> StoreResult<u64> {
        maintenance::job_delete(&mut *self.tx, ids).await
    }

    async fn job_get_many(&mut self, ids: Vec<i64>) -> StoreResult<Vec<JobRow>> {
        maintenance::job_get_many(&mut *self.tx, ids).await
    }

    async fn job_retry(&mut self, p: JobRetry) -> StoreResult<Vec<JobRow>> {
        maintenance::job_retry(&mut *self.tx, p).await
    }

    async fn job_discard(&mut self, p: JobDiscard) -> StoreResult<Vec<i64>> {
        maintenance::job_discard(&mut *self.tx, p).await
    }

    async fn purge(&mut self, p: Purge) -> StoreResult<u64> {
        maintenance::purge(&mut *self.tx, p).await
    }

    async fn job_claim(&mut self, p: JobClaim) -> StoreResult<Vec<JobRow>> {
        single::job_claim(&mut *self.tx, p).await
    }

    async fn job_heartbeat(&mut self, p: JobHeartbeat) -> StoreResult<Vec<LeaseRenewal>> {
        single::job_heartbeat(&mut *self.tx, p).await
    }

    async fn job_complete_many(&mut self, p: JobCompleteMany) -> StoreResult<Vec<i64>> {
        single::job_complete_many(&mut *self.tx, p).await
    }

    async fn job_lock(&mut self, p: JobLock) -> StoreResult<JobRow> {
        let q = sqlx::query(include_str!("../queries/job/lock.sql"))
            .bind(p.lease.job_id)
            .bind(p.lease.fence);
        self.fetch_guarded(q, p.lease, row::job).await
    }

    async fn job_complete(&mut self, p: JobComplete) -> StoreResult<JobRow> {
        single::job_complete(&mut *self.tx, p).await
    }

    async fn job_fail(&mut self, p: JobFail) -> StoreResult<JobRow> {
        single::job_fail(&mut *self.tx, p).await
    }

    async fn job_rescue(&mut self, p: JobRescue) -> StoreResult<Vec<JobRow>> {
        single::job_rescue(&mut *self.tx, p).await
    }

    async fn job_cancel(&mut self, p: JobCancel) -> StoreResult<JobRow> {
        // The attempt of a running job first: the statement locks the row, so a cancel
        // waits for a concurrent claim, completion or failure and sees its outcome.
        sqlx::query(include_str!("../queries/job_attempt/insert.sql"))
            .bind(p.job_id)
            .bind(AttemptOutcome::Cancelled.as_str())
            .bind("cancelled by an operator while running")
            .bind(p.now)
            .bind("running")
            .execute(&mut *self.tx)
            .await
            .map_err(interpret_error)?;
        let row = sqlx::query(include_str!("../queries/job/cancel.sql"))
            .bind(p.job_id)
            .bind(p.now)
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(interpret_error)?;
        match row {
            Some(r) => row::job(&r),
            None => Err(cancel_refusal(self, p.job_id).await),
        }
    }

    async fn effect_claim(&mut self, p: EffectClaim) -> StoreResult<EffectClaimed> {
        let inserted: Option<String> =
            sqlx::query_scalar(include_str!("../queries/effect/claim.sql"))
                .bind(&p.key)
                .bind(&p.kind)
                .bind(p.lease.job_id)
                .bind(p.lease.fence)
                .bind(p.now)
                .fetch_optional(&mut *self.tx)
                .await
                .map_err(interpret_error)?;
        if inserted.is_some() {
            return Ok(EffectClaimed::New);
        }
        let get = include_str!("../queries/effect/get.sql");
        let record = self.existing(get, &p.key, p.lease, row::effect).await?;
        Ok(EffectClaimed::Done(record))
    }

    async fn ledger_post(&mut self, p: LedgerPost) -> StoreResult<LedgerPosted> {
        let inserted: Option<String> =
            sqlx::query_scalar(include_str!("../queries/ledger/post_entry.sql"))
                .bind(&p.entry_key)
                .bind(&p.account)
                .bind(p.amount)
                .bind(p.lease.job_id)
                .bind(p.lease.fence)
                .bind(p.now)
                .fetch_optional(&mut *self.tx)
                .await
                .map_err(interpret_error)?;
        if inserted.is_some() {
            sqlx::query(include_str!("../queries/ledger/move_balance.sql"))
                .bind(&p.account)
                .bind(p.amount)
                .bind(p.now)
                .execute(&mut *self.tx)
                .await
                .map_err(interpret_error)?;
            return Ok(LedgerPosted::New);
        }
        let get = include_str!("../queries/ledger/get_entry.sql");
        let entry = self
            .existing(get, &p.entry_key, p.lease, row::ledger_entry)
            .await?;
        Ok(LedgerPosted::Duplicate(entry))
    }

    async fn effect_others(&mut self, p: EffectClaim) -> StoreResult<Vec<String>> {
        sqlx::query_scalar(include_str!("../queries/effect/others.sql"))
            .bind(p.lease.job_id)
            .bind(&p.kind)
            .bind(&p.key)
            .fetch_all(&mut *self.tx)
            .await
            .map_err(interpret_error)
    }

    async fn counter_next(&mut self, p: CounterNext) -> StoreResult<CounterAssigned> {
        sqlx::query(include_str!("../queries/counter/lock.sql"))
            .bind(&p.counter)
            .execute(&mut *self.tx)
            .await
            .map_err(interpret_error)?;
        let found: Option<i64> = sqlx::query_scalar(include_str!("../queries/counter/find.sql"))
            .bind(&p.key)
            .bind(&p.counter)
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(interpret_error)?;
        if let Some(number) = found {
            return Ok(CounterAssigned { number, new: false });
        }
        let assigned: Option<i64> =
            sqlx::query_scalar(include_str!("../queries/counter/assign.sql"))
                .bind(&p.counter)
                .bind(&p.key)
                .bind(p.lease.job_id)
                .bind(p.lease.fence)
                .bind(p.now)
                .fetch_optional(&mut *self.tx)
                .await
                .map_err(interpret_error)?;
        match assigned {
            Some(number) => Ok(CounterAssigned { number, new: true }),
            None => Err(StoreError::lease_lost(p.lease)),
        }
    }

    async fn ledger_rebuild(&mut self, accounts: Vec<LedgerMismatch>) -> StoreResult<()> {
        for a in accounts {
            sqlx::query(include_str!("../queries/ledger/set_balance.sql"))
                .bind(&a.account)
                .execute(&mut *self.tx)
                .await
                .map_err(interpret_error)?;
        }
        Ok(())
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

/// Why a cancel changed nothing: the job is missing or already finished.
async fn cancel_refusal(tx: &mut PgTx, job_id: i64) -> StoreError {
    match single::job_get(&mut *tx.tx, job_id).await {
        Ok(found) => StoreError::cancel_refused(job_id, found.as_ref()),
        Err(e) => e,
    }
}
