//! [`PgTx`]: one PostgreSQL transaction (READ COMMITTED) on a pooled connection. Each
//! method is one call into `ops/` on the transaction's connection; the guards and locks
//! those operations rely on are described there.
//!
//! `BEGIN` is not sent on its own: it travels with the transaction's first statement.
//! When that is the fence check of an effect transaction ([`StoreTx::job_lock`]), both
//! go in one simple-query round trip (`ops::job::begin_lock`); any other first statement
//! is preceded by `BEGIN`. What must stay true: a transaction that sent `BEGIN` and is
//! dropped without commit or rollback is rolled back before its connection serves
//! anyone else (`Drop`).

use std::any::Any;

use async_trait::async_trait;
use idem_store::{
    Backend, BatchCount, BatchFinish, BatchInsert, BatchRow, BatchSeal, Completed, CounterAssigned,
    CounterNext, EffectClaim, EffectClaimed, EnqueueKeyTake, HttpKeyComplete, HttpKeyRelease,
    HttpKeyReserve, HttpKeyReserved, IntentBegin, IntentBegun, IntentFinish, IntentRenew,
    IntentResolve, IntentRow, JobCancel, JobClaim, JobComplete, JobCompleteMany, JobDiscard,
    JobFail, JobHeartbeat, JobInsert, JobLock, JobRescue, JobRetry, JobRow, JobState, LeaseRenewal,
    LedgerMismatch, LedgerPost, LedgerPosted, Purge, SqlValue, StoreResult, StoreTx,
};
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres};

use crate::connect::BEGIN;
use crate::error::interpret_error;
use crate::ops;
use crate::value;

/// An open transaction on a PostgreSQL store.
pub struct PgTx {
    /// The pooled connection; `None` only once `Drop` has handed it to the rollback.
    conn: Option<PoolConnection<Postgres>>,
    /// Whether `BEGIN` was sent and neither `COMMIT` nor `ROLLBACK` has ended it.
    open: bool,
}

impl PgTx {
    /// Takes a connection; `BEGIN` goes with the first statement.
    pub(crate) async fn begin(pool: &PgPool) -> StoreResult<Self> {
        let conn = pool.acquire().await.map_err(interpret_error)?;
        Ok(PgTx {
            conn: Some(conn),
            open: false,
        })
    }

    /// A transaction whose lock waits end after `timeout` (`lock_timeout` for this
    /// transaction, set in the round trip of its `BEGIN`).
    pub(crate) async fn begin_with_lock_timeout(
        pool: &PgPool,
        timeout: std::time::Duration,
    ) -> StoreResult<Self> {
        let mut tx = PgTx::begin(pool).await?;
        let ms = crate::connect::millis_text(timeout);
        // `ms` is digits only (millis_text), so it can stand in the text of the query.
        let sql = format!("{BEGIN}; SELECT set_config('lock_timeout', '{ms}', true)");
        tx.open = true;
        tx.raw(sql).await?;
        Ok(tx)
    }

    /// The transaction's connection, for a caller's own statements with sqlx's API;
    /// sends `BEGIN` first if no statement has yet.
    pub async fn inner(&mut self) -> StoreResult<&mut PgConnection> {
        self.conn().await
    }

    /// The connection, inside the transaction (`BEGIN` sent).
    async fn conn(&mut self) -> StoreResult<&mut PgConnection> {
        if !self.open {
            self.open = true;
            self.raw(BEGIN.to_owned()).await?;
        }
        Ok(self.connection())
    }

    fn connection(&mut self) -> &mut PgConnection {
        self.conn
            .as_mut()
            .expect("a transaction's connection until drop")
    }

    /// Runs `sql` (one or more statements, no parameters) as one simple query.
    async fn raw(&mut self, sql: String) -> StoreResult<()> {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(self.connection())
            .await
            .map_err(interpret_error)?;
        Ok(())
    }

    /// `COMMIT` or `ROLLBACK` of a transaction that sent `BEGIN`; nothing otherwise.
    async fn end(mut self, sql: &str) -> StoreResult<()> {
        if self.open {
            self.raw(sql.to_owned()).await?;
            self.open = false;
        }
        Ok(())
    }
}

impl Drop for PgTx {
    /// A transaction still open is rolled back on its connection before the connection
    /// goes back to the pool; without a runtime to do it on, the connection is closed,
    /// which ends the transaction on the server.
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take().filter(|_| self.open) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    let rollback = sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await;
                    if rollback.is_err() {
                        conn.close_on_drop();
                    }
                });
            }
            Err(_) => conn.close_on_drop(),
        }
    }
}

#[async_trait]
impl StoreTx for PgTx {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    async fn commit(self: Box<Self>) -> StoreResult<()> {
        self.end("COMMIT").await
    }

    async fn rollback(self: Box<Self>) -> StoreResult<()> {
        self.end("ROLLBACK").await
    }

    /// chaos-break-effect-key: `COMMIT` and `BEGIN` again on this transaction's
    /// connection. sqlx's own count of open transactions stays one, as the server's does.
    #[cfg(feature = "chaos-break-effect-key")]
    async fn restart_for_chaos(&mut self) -> StoreResult<()> {
        self.conn().await?;
        self.raw(format!("COMMIT; {BEGIN}")).await
    }

    async fn job_insert_rows(&mut self, p: JobInsert) -> StoreResult<Vec<JobRow>> {
        ops::job::insert(self.conn().await?, p).await
    }

    async fn enqueue_key_take(&mut self, p: EnqueueKeyTake) -> StoreResult<Vec<i64>> {
        ops::enqueue_key::take(self.conn().await?, p).await
    }

    async fn enqueue_key_find(
        &mut self,
        keys: Vec<(String, String)>,
    ) -> StoreResult<Vec<(String, String, i64)>> {
        ops::enqueue_key::find(self.conn().await?, keys).await
    }

    async fn queue_pause(&mut self, p: idem_store::QueuePause) -> StoreResult<bool> {
        ops::queue::pause(self.conn().await?, p).await
    }

    async fn queue_resume(&mut self, queue: String) -> StoreResult<bool> {
        ops::queue::resume(self.conn().await?, queue).await
    }

    async fn job_unclaim_paused(
        &mut self,
        leases: Vec<idem_store::LeaseToken>,
    ) -> StoreResult<Vec<i64>> {
        ops::job::unclaim_paused(self.conn().await?, leases).await
    }

    async fn job_delete(&mut self, ids: Vec<i64>) -> StoreResult<u64> {
        ops::job::delete(self.conn().await?, ids).await
    }

    async fn job_get_many(&mut self, ids: Vec<i64>) -> StoreResult<Vec<JobRow>> {
        ops::job::get_many(self.conn().await?, ids).await
    }

    async fn job_retry_rows(&mut self, p: JobRetry) -> StoreResult<Vec<(JobRow, JobState)>> {
        ops::job::retry(self.conn().await?, p).await
    }

    async fn job_discard(&mut self, p: JobDiscard) -> StoreResult<Vec<i64>> {
        ops::job::discard(self.conn().await?, p).await
    }

    async fn purge(&mut self, p: Purge) -> StoreResult<u64> {
        match p.target {
            idem_store::PurgeTarget::Batches => ops::purge::batches(self.conn().await?, p).await,
            _ => ops::purge::delete(self.conn().await?, p).await,
        }
    }

    async fn job_claim(&mut self, p: JobClaim) -> StoreResult<Vec<JobRow>> {
        ops::job::claim(self.conn().await?, p).await
    }

    async fn job_heartbeat(&mut self, p: JobHeartbeat) -> StoreResult<Vec<LeaseRenewal>> {
        ops::job::heartbeat(self.conn().await?, p).await
    }

    async fn job_complete_many_rows(&mut self, p: JobCompleteMany) -> StoreResult<Vec<Completed>> {
        ops::job::complete_many(self.conn().await?, p, true).await
    }

    /// The fence check; as a transaction's first statement, sent with its `BEGIN`.
    async fn job_lock(&mut self, p: JobLock) -> StoreResult<JobRow> {
        if self.open {
            return ops::job::lock(self.connection(), p).await;
        }
        self.open = true;
        ops::job::begin_lock(self.connection(), p).await
    }

    async fn job_complete_row(&mut self, p: JobComplete) -> StoreResult<JobRow> {
        ops::job::complete(self.conn().await?, p, true).await
    }

    async fn job_fail_row(&mut self, p: JobFail) -> StoreResult<JobRow> {
        ops::job::fail(self.conn().await?, p, true).await
    }

    async fn job_rescue_rows(&mut self, p: JobRescue) -> StoreResult<Vec<JobRow>> {
        ops::job::rescue(self.conn().await?, p).await
    }

    async fn job_cancel_row(&mut self, p: JobCancel) -> StoreResult<JobRow> {
        ops::job::cancel(self.conn().await?, p).await
    }

    async fn batch_insert(&mut self, p: BatchInsert) -> StoreResult<BatchRow> {
        ops::batch::insert(self.conn().await?, p).await
    }

    async fn batch_shards_lock(&mut self, batch_id: i64) -> StoreResult<()> {
        ops::batch::shards_lock(self.conn().await?, batch_id).await
    }

    async fn batch_shards_add(&mut self, p: BatchCount) -> StoreResult<()> {
        ops::batch::shards_add(self.conn().await?, p).await
    }

    async fn batch_count(&mut self, p: BatchCount) -> StoreResult<Vec<i32>> {
        ops::batch::count(self.conn().await?, p).await
    }

    async fn batch_lock(&mut self, batch_id: i64, open_only: bool) -> StoreResult<bool> {
        ops::batch::lock(self.conn().await?, batch_id, open_only).await
    }

    async fn batch_seal_row(&mut self, p: BatchSeal) -> StoreResult<bool> {
        ops::batch::seal(self.conn().await?, p).await
    }

    async fn batch_finish(&mut self, p: BatchFinish) -> StoreResult<bool> {
        ops::batch::finish(self.conn().await?, p).await
    }

    async fn batch_get(&mut self, batch_id: i64) -> StoreResult<Option<BatchRow>> {
        ops::batch::get(self.conn().await?, batch_id).await
    }

    async fn effect_claim(&mut self, p: EffectClaim) -> StoreResult<EffectClaimed> {
        ops::effect::claim(self.conn().await?, p).await
    }

    async fn intent_begin(&mut self, p: IntentBegin) -> StoreResult<IntentBegun> {
        ops::intent::begin(self.conn().await?, p).await
    }

    async fn intent_renew(&mut self, p: IntentRenew) -> StoreResult<IntentRow> {
        ops::intent::renew(self.conn().await?, p).await
    }

    async fn intent_finish(&mut self, p: IntentFinish) -> StoreResult<IntentRow> {
        ops::intent::finish(self.conn().await?, p).await
    }

    async fn intent_resolve(&mut self, p: IntentResolve) -> StoreResult<IntentRow> {
        ops::intent::resolve(self.conn().await?, p).await
    }

    async fn http_key_reserve(&mut self, p: HttpKeyReserve) -> StoreResult<HttpKeyReserved> {
        ops::http_key::reserve(self.conn().await?, p).await
    }

    async fn http_key_complete(&mut self, p: HttpKeyComplete) -> StoreResult<bool> {
        ops::http_key::complete(self.conn().await?, p).await
    }

    async fn http_key_release(&mut self, p: HttpKeyRelease) -> StoreResult<bool> {
        ops::http_key::release(self.conn().await?, p).await
    }

    async fn ledger_post(&mut self, p: LedgerPost) -> StoreResult<LedgerPosted> {
        ops::ledger::post(self.conn().await?, p).await
    }

    async fn effect_others(&mut self, p: EffectClaim) -> StoreResult<Vec<String>> {
        ops::effect::others(self.conn().await?, p).await
    }

    async fn counter_next(&mut self, p: CounterNext) -> StoreResult<CounterAssigned> {
        ops::counter::next(self.conn().await?, p).await
    }

    async fn ledger_rebuild(&mut self, accounts: Vec<LedgerMismatch>) -> StoreResult<()> {
        ops::ledger::rebuild(self.conn().await?, accounts).await
    }

    async fn execute(&mut self, sql: &str, args: &[SqlValue]) -> StoreResult<u64> {
        value::execute(self.conn().await?, sql, args).await
    }

    async fn query(&mut self, sql: &str, args: &[SqlValue]) -> StoreResult<Vec<Vec<SqlValue>>> {
        value::query(self.conn().await?, sql, args).await
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
