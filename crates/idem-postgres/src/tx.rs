//! [`PgTx`]: one PostgreSQL transaction (READ COMMITTED) on a pooled connection. Each
//! method is one call into `ops/` on the transaction's connection; the guards and locks
//! those operations rely on are described there.

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
use sqlx::{Postgres, Transaction};

use crate::error::interpret_error;
use crate::ops;
use crate::pooler::Pool;
use crate::value;

/// An open transaction on a PostgreSQL store.
pub struct PgTx {
    tx: Transaction<'static, Postgres>,
    /// Whether a statement of this transaction may have failed: one of its operations
    /// answered an error, or a caller ran statements of its own ([`PgTx::inner`]).
    /// PostgreSQL aborts a transaction at its first failed statement and answers its
    /// `COMMIT` with a rollback, not an error, so [`StoreTx::commit`] asks first.
    doubt: bool,
}

/// `answer`, noting in `doubt` when it is an error: the statement may have failed and
/// aborted the transaction.
fn noted<T>(doubt: &mut bool, answer: StoreResult<T>) -> StoreResult<T> {
    *doubt |= answer.is_err();
    answer
}

impl PgTx {
    pub(crate) async fn begin(pool: &Pool) -> StoreResult<Self> {
        Ok(PgTx {
            tx: pool.begin().await?,
            doubt: false,
        })
    }

    /// A transaction whose lock waits end after `timeout` (`SET LOCAL lock_timeout`).
    pub(crate) async fn begin_with_lock_timeout(
        pool: &Pool,
        timeout: std::time::Duration,
    ) -> StoreResult<Self> {
        let mut tx = PgTx::begin(pool).await?;
        let ms = crate::connect::millis_text(timeout);
        sqlx::query("SELECT set_config('lock_timeout', $1, true)")
            .bind(ms)
            .execute(&mut *tx.tx)
            .await
            .map_err(interpret_error)?;
        Ok(tx)
    }

    /// The sqlx transaction, for a caller's own statements with sqlx's API. Its commit
    /// then checks that none of them failed (which would have aborted the transaction).
    pub fn inner(&mut self) -> &mut Transaction<'static, Postgres> {
        self.doubt = true;
        &mut self.tx
    }
}

#[async_trait]
impl StoreTx for PgTx {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    /// Commits; when a statement may have failed, first asks the server whether the
    /// transaction is still alive (a statement in an aborted transaction fails), so that
    /// a transaction PostgreSQL would roll back at `COMMIT` answers an error, not `Ok`.
    async fn commit(mut self: Box<Self>) -> StoreResult<()> {
        if self.doubt
            && let Err(e) = sqlx::raw_sql("SELECT 1").execute(&mut *self.tx).await
        {
            return Err(interpret_error(e));
        }
        self.tx.commit().await.map_err(interpret_error)
    }

    async fn rollback(self: Box<Self>) -> StoreResult<()> {
        self.tx.rollback().await.map_err(interpret_error)
    }

    /// chaos-break-effect-key: `COMMIT` and `BEGIN` again on this transaction's
    /// connection. sqlx's own count of open transactions stays one, as the server's does.
    #[cfg(feature = "chaos-break-effect-key")]
    async fn restart_for_chaos(&mut self) -> StoreResult<()> {
        for sql in ["COMMIT", crate::connect::BEGIN] {
            sqlx::raw_sql(sql)
                .execute(&mut *self.tx)
                .await
                .map_err(interpret_error)?;
        }
        Ok(())
    }

    async fn job_insert_rows(&mut self, p: JobInsert) -> StoreResult<Vec<JobRow>> {
        noted(&mut self.doubt, ops::job::insert(&mut *self.tx, p).await)
    }

    async fn enqueue_key_take(&mut self, p: EnqueueKeyTake) -> StoreResult<Vec<i64>> {
        noted(
            &mut self.doubt,
            ops::enqueue_key::take(&mut *self.tx, p).await,
        )
    }

    async fn enqueue_key_find(
        &mut self,
        keys: Vec<(String, String)>,
    ) -> StoreResult<Vec<(String, String, i64)>> {
        noted(
            &mut self.doubt,
            ops::enqueue_key::find(&mut *self.tx, keys).await,
        )
    }

    async fn queue_pause(&mut self, p: idem_store::QueuePause) -> StoreResult<bool> {
        noted(&mut self.doubt, ops::queue::pause(&mut *self.tx, p).await)
    }

    async fn queue_resume(&mut self, queue: String) -> StoreResult<bool> {
        noted(
            &mut self.doubt,
            ops::queue::resume(&mut *self.tx, queue).await,
        )
    }

    async fn leader_elect(
        &mut self,
        p: idem_store::LeaderElect,
    ) -> StoreResult<idem_store::Leadership> {
        noted(&mut self.doubt, ops::leader::elect(&mut self.tx, p).await)
    }

    async fn leader_renew(
        &mut self,
        p: idem_store::LeaderRenew,
    ) -> StoreResult<idem_store::Leadership> {
        noted(&mut self.doubt, ops::leader::renew(&mut self.tx, p).await)
    }

    async fn leader_check(
        &mut self,
        token: idem_store::LeaderToken,
        now: Option<idem_store::Timestamp>,
    ) -> StoreResult<()> {
        noted(
            &mut self.doubt,
            ops::leader::check(&mut self.tx, token, now).await,
        )
    }

    async fn job_unclaim_paused(
        &mut self,
        leases: Vec<idem_store::LeaseToken>,
    ) -> StoreResult<Vec<i64>> {
        noted(
            &mut self.doubt,
            ops::job::unclaim_paused(&mut *self.tx, leases).await,
        )
    }

    async fn job_delete(&mut self, ids: Vec<i64>) -> StoreResult<u64> {
        noted(&mut self.doubt, ops::job::delete(&mut *self.tx, ids).await)
    }

    async fn job_get_many(&mut self, ids: Vec<i64>) -> StoreResult<Vec<JobRow>> {
        noted(
            &mut self.doubt,
            ops::job::get_many(&mut *self.tx, ids).await,
        )
    }

    async fn job_retry_rows(&mut self, p: JobRetry) -> StoreResult<Vec<(JobRow, JobState)>> {
        noted(&mut self.doubt, ops::job::retry(&mut *self.tx, p).await)
    }

    async fn job_await_intent(&mut self, job_id: i64, key: String) -> StoreResult<bool> {
        noted(
            &mut self.doubt,
            ops::job::await_intent(&mut *self.tx, job_id, key).await,
        )
    }

    async fn job_put_back_rows(&mut self, p: idem_store::JobPutBack) -> StoreResult<Vec<JobRow>> {
        noted(&mut self.doubt, ops::job::put_back(&mut *self.tx, p).await)
    }

    async fn job_discard(&mut self, p: JobDiscard) -> StoreResult<Vec<i64>> {
        noted(&mut self.doubt, ops::job::discard(&mut *self.tx, p).await)
    }

    async fn purge(&mut self, p: Purge) -> StoreResult<u64> {
        let done = match p.target {
            idem_store::PurgeTarget::Batches => ops::purge::batches(&mut self.tx, p).await,
            _ => ops::purge::delete(&mut *self.tx, p).await,
        };
        noted(&mut self.doubt, done)
    }

    async fn job_claim(&mut self, p: JobClaim) -> StoreResult<Vec<JobRow>> {
        noted(&mut self.doubt, ops::job::claim(&mut *self.tx, p).await)
    }

    async fn job_heartbeat(&mut self, p: JobHeartbeat) -> StoreResult<Vec<LeaseRenewal>> {
        noted(&mut self.doubt, ops::job::heartbeat(&mut *self.tx, p).await)
    }

    async fn job_complete_many_rows(&mut self, p: JobCompleteMany) -> StoreResult<Vec<Completed>> {
        noted(
            &mut self.doubt,
            ops::job::complete_many(&mut *self.tx, p, true).await,
        )
    }

    async fn job_lock(&mut self, p: JobLock) -> StoreResult<JobRow> {
        noted(&mut self.doubt, ops::job::lock(&mut *self.tx, p).await)
    }

    async fn job_complete_row(&mut self, p: JobComplete) -> StoreResult<JobRow> {
        noted(
            &mut self.doubt,
            ops::job::complete(&mut *self.tx, p, true).await,
        )
    }

    async fn job_fail_row(&mut self, p: JobFail) -> StoreResult<JobRow> {
        noted(
            &mut self.doubt,
            ops::job::fail(&mut *self.tx, p, true).await,
        )
    }

    async fn job_rescue_rows(&mut self, p: JobRescue) -> StoreResult<Vec<JobRow>> {
        noted(&mut self.doubt, ops::job::rescue(&mut *self.tx, p).await)
    }

    async fn job_cancel_row(&mut self, p: JobCancel) -> StoreResult<JobRow> {
        noted(&mut self.doubt, ops::job::cancel(&mut self.tx, p).await)
    }

    async fn batch_insert(&mut self, p: BatchInsert) -> StoreResult<BatchRow> {
        noted(&mut self.doubt, ops::batch::insert(&mut *self.tx, p).await)
    }

    async fn batch_shards_lock(&mut self, batch_id: i64) -> StoreResult<()> {
        noted(
            &mut self.doubt,
            ops::batch::shards_lock(&mut *self.tx, batch_id).await,
        )
    }

    async fn batch_shards_add(&mut self, p: BatchCount) -> StoreResult<()> {
        noted(
            &mut self.doubt,
            ops::batch::shards_add(&mut *self.tx, p).await,
        )
    }

    async fn batch_count(&mut self, p: BatchCount) -> StoreResult<Vec<i32>> {
        noted(&mut self.doubt, ops::batch::count(&mut *self.tx, p).await)
    }

    async fn batch_lock(&mut self, batch_id: i64, open_only: bool) -> StoreResult<bool> {
        noted(
            &mut self.doubt,
            ops::batch::lock(&mut *self.tx, batch_id, open_only).await,
        )
    }

    async fn batch_seal_row(&mut self, p: BatchSeal) -> StoreResult<bool> {
        noted(&mut self.doubt, ops::batch::seal(&mut *self.tx, p).await)
    }

    async fn batch_finish(&mut self, p: BatchFinish) -> StoreResult<bool> {
        noted(&mut self.doubt, ops::batch::finish(&mut *self.tx, p).await)
    }

    async fn batch_get(&mut self, batch_id: i64) -> StoreResult<Option<BatchRow>> {
        noted(
            &mut self.doubt,
            ops::batch::get(&mut *self.tx, batch_id).await,
        )
    }

    async fn effect_claim(&mut self, p: EffectClaim) -> StoreResult<EffectClaimed> {
        noted(&mut self.doubt, ops::effect::claim(&mut self.tx, p).await)
    }

    async fn intent_begin(&mut self, p: IntentBegin) -> StoreResult<IntentBegun> {
        noted(&mut self.doubt, ops::intent::begin(&mut self.tx, p).await)
    }

    async fn intent_renew(&mut self, p: IntentRenew) -> StoreResult<IntentRow> {
        noted(&mut self.doubt, ops::intent::renew(&mut *self.tx, p).await)
    }

    async fn intent_finish(&mut self, p: IntentFinish) -> StoreResult<IntentRow> {
        noted(&mut self.doubt, ops::intent::finish(&mut *self.tx, p).await)
    }

    async fn intent_resolve(&mut self, p: IntentResolve) -> StoreResult<IntentRow> {
        noted(&mut self.doubt, ops::intent::resolve(&mut self.tx, p).await)
    }

    async fn intent_lock(&mut self, key: String) -> StoreResult<Option<IntentRow>> {
        noted(&mut self.doubt, ops::intent::lock(&mut self.tx, key).await)
    }

    async fn http_key_reserve(&mut self, p: HttpKeyReserve) -> StoreResult<HttpKeyReserved> {
        noted(
            &mut self.doubt,
            ops::http_key::reserve(&mut self.tx, p).await,
        )
    }

    async fn http_key_complete(&mut self, p: HttpKeyComplete) -> StoreResult<bool> {
        noted(
            &mut self.doubt,
            ops::http_key::complete(&mut *self.tx, p).await,
        )
    }

    async fn http_key_release(&mut self, p: HttpKeyRelease) -> StoreResult<bool> {
        noted(
            &mut self.doubt,
            ops::http_key::release(&mut *self.tx, p).await,
        )
    }

    async fn ledger_post(&mut self, p: LedgerPost) -> StoreResult<LedgerPosted> {
        noted(&mut self.doubt, ops::ledger::post(&mut self.tx, p).await)
    }

    async fn effect_others(&mut self, p: EffectClaim) -> StoreResult<Vec<String>> {
        noted(&mut self.doubt, ops::effect::others(&mut *self.tx, p).await)
    }

    async fn counter_next(&mut self, p: CounterNext) -> StoreResult<CounterAssigned> {
        noted(&mut self.doubt, ops::counter::next(&mut self.tx, p).await)
    }

    async fn ledger_rebuild(&mut self, accounts: Vec<LedgerMismatch>) -> StoreResult<()> {
        noted(
            &mut self.doubt,
            ops::ledger::rebuild(&mut self.tx, accounts).await,
        )
    }

    async fn execute(&mut self, sql: &str, args: &[SqlValue]) -> StoreResult<u64> {
        noted(
            &mut self.doubt,
            value::execute(&mut *self.tx, sql, args).await,
        )
    }

    async fn query(&mut self, sql: &str, args: &[SqlValue]) -> StoreResult<Vec<Vec<SqlValue>>> {
        noted(
            &mut self.doubt,
            value::query(&mut *self.tx, sql, args).await,
        )
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
