//! [`SqliteTx`]: one write transaction, a member of the writer's group commit
//! (`writer/group.rs`), holding the writer's turn from `begin` to commit, rollback or drop.
//!
//! While it is open no other transaction of this store runs on the write connection
//! (store operations wait their turn). Its statements run on the caller's thread under
//! the connection's mutex, after the closures sent before it have run; only a first
//! statement that must begin a new group goes to the writer thread (a `BEGIN IMMEDIATE`
//! may wait on another process). `commit` releases its savepoint into the group and
//! returns once the group's `COMMIT` has; dropped without `commit`, it rolls back to its
//! savepoint, undoing only its own writes.

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
use rusqlite::Connection;
use tokio::sync::OwnedMutexGuard;

use crate::error::interpret_error;
use crate::ops;
use crate::value;
use crate::writer::{Coming, Member, Writer};

/// An open write transaction on an SQLite store.
///
/// The writer's turn is held from `begin`; the savepoint opens with the first operation.
/// A transaction that ran nothing commits or rolls back without touching the connection.
pub struct SqliteTx {
    writer: OwnedMutexGuard<Writer>,
    /// Counts this transaction as coming to the group until it ends.
    coming: Option<Coming>,
    /// Its savepoint, once the first operation opened it.
    member: Option<Member>,
}

impl SqliteTx {
    pub(crate) async fn begin(writer: &crate::WriterLock) -> StoreResult<Self> {
        let coming = writer.coming();
        let writer = writer.acquire().await?;
        writer.ensure_open()?;
        Ok(SqliteTx {
            writer,
            coming: Some(coming),
            member: None,
        })
    }

    /// Runs `f` on the transaction's connection for statements that need rusqlite's own
    /// API. `f` must not end the transaction.
    ///
    /// ```
    /// # use idem_sqlite::{SqliteOptions, SqliteStore, SqliteTx};
    /// # use idem_store::Store;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # let dir = std::env::temp_dir().join(format!("idem-doc-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// # let url = format!("sqlite://{}", dir.join("doc.db").display());
    /// let store = SqliteStore::connect(&url, SqliteOptions::default()).await.unwrap();
    /// let mut tx = store.begin().await.unwrap();
    /// let sqlite: &mut SqliteTx = tx.as_any_mut().downcast_mut().unwrap();
    /// let two: i64 = sqlite
    ///     .with_connection(|c| c.query_row("SELECT 1 + 1", [], |r| r.get(0)))
    ///     .await
    ///     .unwrap();
    /// assert_eq!(two, 2);
    /// tx.commit().await.unwrap();
    /// # store.close().await;
    /// # std::fs::remove_dir_all(dir).unwrap();
    /// # }
    /// ```
    pub async fn with_connection<R: Send + 'static>(
        &mut self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<R> + Send + 'static,
    ) -> StoreResult<R> {
        self.run(move |c| f(c).map_err(interpret_error)).await
    }

    async fn run<R: Send + 'static>(
        &mut self,
        f: impl FnOnce(&Connection) -> StoreResult<R> + Send + 'static,
    ) -> StoreResult<R> {
        if let Some(m) = self.member {
            return self.writer.inline(|w| w.run(m, f));
        }
        // Closures sent before this transaction got the writer run first. Then it joins
        // the open group on this thread, unless the writer thread is busy committing.
        self.writer.idle().await;
        if let Some(joined) = self.writer.try_inline(|w| w.join())
            && let Some(m) = joined?
        {
            self.member = Some(m);
            return self.writer.inline(|w| w.run(m, f));
        }
        let (m, out) = self.writer.open(f).await?;
        self.member = Some(m);
        out
    }

    /// Ends the transaction's count as coming, and has the writer thread commit the
    /// group if it is due; before the writer's turn passes on. A writer thread busy with
    /// a closure looks at the group itself when that closure ends.
    fn ended(&mut self) {
        let others = self.coming.take().map_or(0, Coming::end);
        if self.writer.try_inline(|w| w.due(others)) != Some(false) {
            self.writer.poke();
        }
    }
}

impl Drop for SqliteTx {
    fn drop(&mut self) {
        if let Some(m) = self.member.take() {
            self.writer.inline(|w| w.abandon(m));
        }
        if self.coming.is_some() {
            self.ended();
        }
    }
}

#[async_trait]
impl StoreTx for SqliteTx {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    async fn commit(mut self: Box<Self>) -> StoreResult<()> {
        let Some(m) = self.member.take() else {
            self.ended();
            return Ok(());
        };
        let durable = self.writer.inline(|w| w.release(m));
        self.ended();
        drop(self);
        durable.wait().await
    }

    async fn rollback(mut self: Box<Self>) -> StoreResult<()> {
        if let Some(m) = self.member.take() {
            self.writer.inline(|w| w.abandon(m));
        }
        self.ended();
        Ok(())
    }

    /// chaos-break-effect-key: commits the group with what this transaction wrote so far
    /// and opens a new one on the writer this transaction holds.
    #[cfg(feature = "chaos-break-effect-key")]
    async fn restart_for_chaos(&mut self) -> StoreResult<()> {
        let Some(m) = self.member else {
            return Ok(());
        };
        self.member = Some(self.writer.inline(|w| w.restart(m))?);
        self.writer.poke(); // the writer thread looks at the group it did not begin
        Ok(())
    }

    async fn job_insert_rows(&mut self, p: JobInsert) -> StoreResult<Vec<JobRow>> {
        self.run(move |c| ops::job::insert(c, p)).await
    }

    async fn enqueue_key_take(&mut self, p: EnqueueKeyTake) -> StoreResult<Vec<i64>> {
        self.run(move |c| ops::enqueue_key::take(c, &p)).await
    }

    async fn enqueue_key_find(
        &mut self,
        keys: Vec<(String, String)>,
    ) -> StoreResult<Vec<(String, String, i64)>> {
        self.run(move |c| ops::enqueue_key::find(c, &keys)).await
    }

    async fn queue_pause(&mut self, p: idem_store::QueuePause) -> StoreResult<bool> {
        self.run(move |c| ops::queue::pause(c, &p)).await
    }

    async fn queue_resume(&mut self, queue: String) -> StoreResult<bool> {
        self.run(move |c| ops::queue::resume(c, &queue)).await
    }

    async fn leader_elect(
        &mut self,
        p: idem_store::LeaderElect,
    ) -> StoreResult<idem_store::Leadership> {
        self.run(move |c| ops::leader::elect(c, &p)).await
    }

    async fn leader_renew(
        &mut self,
        p: idem_store::LeaderRenew,
    ) -> StoreResult<idem_store::Leadership> {
        self.run(move |c| ops::leader::renew(c, &p)).await
    }

    async fn leader_check(
        &mut self,
        token: idem_store::LeaderToken,
        now: Option<idem_store::Timestamp>,
    ) -> StoreResult<()> {
        self.run(move |c| ops::leader::check(c, &token, now)).await
    }

    async fn job_unclaim_paused(
        &mut self,
        leases: Vec<idem_store::LeaseToken>,
    ) -> StoreResult<Vec<i64>> {
        self.run(move |c| ops::job::unclaim_paused(c, &leases))
            .await
    }

    async fn job_delete(&mut self, ids: Vec<i64>) -> StoreResult<u64> {
        self.run(move |c| ops::job::delete(c, &ids)).await
    }

    async fn job_get_many(&mut self, ids: Vec<i64>) -> StoreResult<Vec<JobRow>> {
        self.run(move |c| ops::job::get_many(c, &ids)).await
    }

    async fn job_retry_rows(&mut self, p: JobRetry) -> StoreResult<Vec<(JobRow, JobState)>> {
        self.run(move |c| ops::job::retry(c, &p)).await
    }

    async fn job_await_intent(&mut self, job_id: i64, key: String) -> StoreResult<bool> {
        self.run(move |c| ops::job::await_intent(c, job_id, &key))
            .await
    }

    async fn job_put_back_rows(&mut self, p: idem_store::JobPutBack) -> StoreResult<Vec<JobRow>> {
        self.run(move |c| ops::job::put_back(c, &p)).await
    }

    async fn job_discard(&mut self, p: JobDiscard) -> StoreResult<Vec<i64>> {
        self.run(move |c| ops::job::discard(c, &p)).await
    }

    async fn purge(&mut self, p: Purge) -> StoreResult<u64> {
        self.run(move |c| ops::purge::delete(c, &p)).await
    }

    async fn job_claim(&mut self, p: JobClaim) -> StoreResult<Vec<JobRow>> {
        self.run(move |c| ops::job::claim(c, &p)).await
    }

    async fn job_heartbeat(&mut self, p: JobHeartbeat) -> StoreResult<Vec<LeaseRenewal>> {
        self.run(move |c| ops::job::heartbeat(c, &p)).await
    }

    async fn job_lock(&mut self, p: JobLock) -> StoreResult<JobRow> {
        self.run(move |c| ops::job::lock(c, &p)).await
    }

    async fn job_complete_row(&mut self, p: JobComplete) -> StoreResult<JobRow> {
        self.run(move |c| ops::job::complete(c, &p, true)).await
    }

    async fn job_complete_many_rows(&mut self, p: JobCompleteMany) -> StoreResult<Vec<Completed>> {
        self.run(move |c| ops::job::complete_many(c, &p, true))
            .await
    }

    async fn job_fail_row(&mut self, p: JobFail) -> StoreResult<JobRow> {
        self.run(move |c| ops::job::fail(c, &p, true)).await
    }

    async fn job_rescue_rows(&mut self, p: JobRescue) -> StoreResult<Vec<JobRow>> {
        self.run(move |c| ops::job::rescue(c, &p)).await
    }

    async fn job_cancel_row(&mut self, p: JobCancel) -> StoreResult<JobRow> {
        self.run(move |c| ops::job::cancel(c, &p)).await
    }

    async fn batch_insert(&mut self, p: BatchInsert) -> StoreResult<BatchRow> {
        self.run(move |c| ops::batch::insert(c, &p)).await
    }

    async fn batch_shards_lock(&mut self, batch_id: i64) -> StoreResult<()> {
        self.run(move |c| ops::batch::shards_lock(c, batch_id))
            .await
    }

    async fn batch_shards_add(&mut self, p: BatchCount) -> StoreResult<()> {
        self.run(move |c| ops::batch::shards_add(c, &p)).await
    }

    async fn batch_count(&mut self, p: BatchCount) -> StoreResult<Vec<i32>> {
        self.run(move |c| ops::batch::count(c, &p)).await
    }

    async fn batch_lock(&mut self, batch_id: i64, open_only: bool) -> StoreResult<bool> {
        self.run(move |c| ops::batch::lock(c, batch_id, open_only))
            .await
    }

    async fn batch_seal_row(&mut self, p: BatchSeal) -> StoreResult<bool> {
        self.run(move |c| ops::batch::seal(c, &p)).await
    }

    async fn batch_finish(&mut self, p: BatchFinish) -> StoreResult<bool> {
        self.run(move |c| ops::batch::finish(c, &p)).await
    }

    async fn batch_get(&mut self, batch_id: i64) -> StoreResult<Option<BatchRow>> {
        self.run(move |c| ops::batch::get(c, batch_id)).await
    }

    async fn effect_claim(&mut self, p: EffectClaim) -> StoreResult<EffectClaimed> {
        self.run(move |c| ops::effect::claim(c, &p)).await
    }

    async fn intent_begin(&mut self, p: IntentBegin) -> StoreResult<IntentBegun> {
        self.run(move |c| ops::intent::begin(c, &p)).await
    }

    async fn intent_renew(&mut self, p: IntentRenew) -> StoreResult<IntentRow> {
        self.run(move |c| ops::intent::renew(c, &p)).await
    }

    async fn intent_finish(&mut self, p: IntentFinish) -> StoreResult<IntentRow> {
        self.run(move |c| ops::intent::finish(c, &p)).await
    }

    async fn intent_resolve(&mut self, p: IntentResolve) -> StoreResult<IntentRow> {
        self.run(move |c| ops::intent::resolve(c, &p)).await
    }

    async fn intent_lock(&mut self, key: String) -> StoreResult<Option<IntentRow>> {
        self.run(move |c| ops::intent::lock(c, &key)).await
    }

    async fn http_key_reserve(&mut self, p: HttpKeyReserve) -> StoreResult<HttpKeyReserved> {
        self.run(move |c| ops::http_key::reserve(c, &p)).await
    }

    async fn http_key_complete(&mut self, p: HttpKeyComplete) -> StoreResult<bool> {
        self.run(move |c| ops::http_key::complete(c, &p)).await
    }

    async fn http_key_release(&mut self, p: HttpKeyRelease) -> StoreResult<bool> {
        self.run(move |c| ops::http_key::release(c, &p)).await
    }

    async fn ledger_post(&mut self, p: LedgerPost) -> StoreResult<LedgerPosted> {
        self.run(move |c| ops::ledger::post(c, &p)).await
    }

    async fn effect_others(&mut self, p: EffectClaim) -> StoreResult<Vec<String>> {
        self.run(move |c| ops::effect::others(c, &p)).await
    }

    async fn counter_next(&mut self, p: CounterNext) -> StoreResult<CounterAssigned> {
        self.run(move |c| ops::counter::next(c, &p)).await
    }

    async fn ledger_rebuild(&mut self, accounts: Vec<LedgerMismatch>) -> StoreResult<()> {
        self.run(move |c| ops::ledger::rebuild(c, &accounts)).await
    }

    async fn execute(&mut self, sql: &str, args: &[SqlValue]) -> StoreResult<u64> {
        let (sql, args) = (sql.to_owned(), args.to_vec());
        self.run(move |c| value::execute(c, &sql, &args)).await
    }

    async fn query(&mut self, sql: &str, args: &[SqlValue]) -> StoreResult<Vec<Vec<SqlValue>>> {
        let (sql, args) = (sql.to_owned(), args.to_vec());
        self.run(move |c| value::query(c, &sql, &args)).await
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
