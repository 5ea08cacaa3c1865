//! The [`Store`] and [`StoreTx`] traits: the seam between the engine and a database.
//!
//! A store implements the transactional operations once, on [`StoreTx`]; [`Store`]'s
//! write methods are provided: each opens a transaction, calls the [`StoreTx`] method and
//! commits. So an operation behaves the same whether the engine calls it alone or a
//! caller runs it inside a transaction of its own (`enqueue_tx`, a handler's effect
//! transaction).

use std::any::Any;

use async_trait::async_trait;

use crate::batch::BatchTally;
use crate::{
    AttemptRow, Backend, BatchAdd, BatchAdded, BatchCount, BatchCreate, BatchRow, BatchSeal,
    EnqueueKeyTake, Enqueued, JobCancel, JobClaim, JobComplete, JobCompleteMany, JobDiscard,
    JobFail, JobHeartbeat, JobInsert, JobList, JobRescue, JobRetry, JobRow, JobState, LeaseRenewal,
    Purge, PurgeTarget, QueueCount, SqlValue, StoreResult, Timestamp,
};

/// Runs `$op` on a fresh transaction and commits it.
macro_rules! in_tx {
    ($store:expr, $op:ident, $params:expr) => {{
        let mut tx = $store.begin().await?;
        let out = tx.$op($params).await?;
        tx.commit().await?;
        Ok(out)
    }};
}

/// A job store: a connection pool to one database, with idem's schema.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Which implementation this is.
    fn backend(&self) -> Backend;

    /// Applies the embedded migrations not applied yet; returns how many ran.
    async fn migrate(&self) -> StoreResult<usize>;

    /// Where the database's schema stands against this build: the migrations it
    /// recorded, those pending and those newer than this build
    /// ([`crate::migration::SchemaStatus`]). Writes nothing, so it runs in a read-only
    /// session; a database without idem's migrations table has every migration pending.
    async fn schema_status(&self) -> StoreResult<crate::migration::SchemaStatus>;

    /// Opens a write transaction (SQLite: `BEGIN IMMEDIATE` on the single writer).
    async fn begin(&self) -> StoreResult<Box<dyn StoreTx>>;

    /// The database clock.
    async fn now(&self) -> StoreResult<Timestamp>;

    /// One job by id.
    async fn job_get(&self, id: i64) -> StoreResult<Option<JobRow>>;

    /// The oldest job that awaited intent `key` (see [`StoreTx::job_await_intent`]),
    /// whatever its state; `None` when none did.
    async fn job_awaiting(&self, key: String) -> StoreResult<Option<JobRow>>;

    /// Jobs matching the filters, newest first.
    async fn job_list(&self, params: JobList) -> StoreResult<Vec<JobRow>>;

    /// The finished attempts of a job, oldest first.
    async fn job_attempts(&self, job_id: i64) -> StoreResult<Vec<AttemptRow>>;

    /// When the first recorded attempt of each listed job started: `(job_id, earliest
    /// started_at)`, in id order. Jobs without a finished attempt that has a start time
    /// (never ran) are absent. An operator retry is judged by it: the effect keys of a
    /// job's first attempt are its oldest.
    async fn job_first_attempts(&self, ids: Vec<i64>) -> StoreResult<Vec<(i64, Timestamp)>>;

    /// Job counts per queue and state.
    async fn queue_counts(&self) -> StoreResult<Vec<QueueCount>>;

    /// Waiting jobs (available, scheduled, retryable) per queue and kind, with the
    /// earliest `run_at` of each, ordered by queue and kind.
    async fn queue_waiting(&self) -> StoreResult<Vec<crate::QueueWaiting>>;

    /// Per queue, the jobs that reached `completed` or `dead` in a time range, with their
    /// summed run and wait times, ordered by queue.
    async fn queue_finished(
        &self,
        params: crate::QueueFinishedList,
    ) -> StoreResult<Vec<crate::QueueFinished>>;

    /// The effect keys one job recorded (by any of its attempts), oldest first.
    async fn effect_list(&self, params: crate::EffectList)
    -> StoreResult<Vec<crate::EffectRecord>>;

    /// Every paused queue, by name.
    async fn queue_paused(&self) -> StoreResult<Vec<crate::PausedQueue>>;

    /// Runs a caller's read statement outside any transaction; rows of values.
    async fn query(&self, sql: &str, args: &[SqlValue]) -> StoreResult<Vec<Vec<SqlValue>>>;

    /// Closes the pool; later calls fail with [`crate::StoreError::Unavailable`].
    async fn close(&self);

    /// One intent by key.
    async fn intent_get(&self, key: String) -> StoreResult<Option<crate::IntentRow>>;

    /// Intents matching the filters, in key order.
    async fn intent_list(&self, params: crate::IntentList) -> StoreResult<Vec<crate::IntentRow>>;

    /// Intents per state (states without intents left out), for the metrics' gauge.
    async fn intent_counts(&self) -> StoreResult<Vec<crate::IntentCount>>;

    /// One batch by id.
    async fn batch_get(&self, batch_id: i64) -> StoreResult<Option<BatchRow>>;

    /// Batches matching the filters, newest first.
    async fn batch_list(&self, params: crate::BatchList) -> StoreResult<Vec<BatchRow>>;

    /// A page of a batch's children, in id order.
    async fn batch_children(&self, params: crate::BatchChildren) -> StoreResult<Vec<JobRow>>;

    /// How many of a batch's children are in each state (states with none left out).
    async fn batch_states(&self, batch_id: i64) -> StoreResult<Vec<(JobState, i64)>>;

    /// Every account whose running total differs from the sum of its entries (including
    /// accounts with entries and no total).
    async fn ledger_verify(&self) -> StoreResult<Vec<crate::LedgerMismatch>>;

    /// Sets every mismatched running total to the sum of its entries, in one transaction;
    /// returns what it changed. With `apply: false` it only returns what it would change.
    async fn ledger_repair(&self, apply: bool) -> StoreResult<Vec<crate::LedgerMismatch>> {
        let found = self.ledger_verify().await?;
        if apply && !found.is_empty() {
            let mut tx = self.begin().await?;
            tx.ledger_rebuild(found.clone()).await?;
            tx.commit().await?;
        }
        Ok(found)
    }

    /// How many connections the store's pool for transactions holds at most: what a
    /// worker's running effect transactions, completion flushes, listener and maintenance
    /// draw on. `None` for a store whose writes queue on one writer instead (SQLite).
    fn connections(&self) -> Option<u32> {
        None
    }

    /// The pool setting that gives [`Store::connections`] `transactions` connections: the
    /// same number unless the store keeps some of its setting for pools of its own.
    fn connections_for(&self, transactions: u32) -> u32 {
        transactions
    }

    /// Whether this store can carry wake-ups between processes ([`Store::announce`],
    /// [`Store::subscribe`]). Without it, workers in other processes find new jobs by
    /// polling.
    fn has_channel(&self) -> bool {
        false
    }

    /// Tells workers in other processes that jobs wait in `queues` (empty = any queue).
    /// Best effort: a lost announcement only delays a worker until its next poll.
    async fn announce(&self, queues: &[String]) -> StoreResult<()> {
        let _ = queues;
        Ok(())
    }

    /// Subscribes to announcements from other processes; `None` without a channel, or
    /// once the store is closed. A subscription may hold a pooled connection: one being
    /// awaited (`Wakeups::next`) ends when the store closes; one held without being
    /// awaited keeps `close` waiting until it is dropped.
    async fn subscribe(&self) -> StoreResult<Option<Box<dyn Wakeups>>> {
        Ok(None)
    }

    /// [`StoreTx::queue_pause`] in its own transaction.
    async fn queue_pause(&self, params: crate::QueuePause) -> StoreResult<bool> {
        in_tx!(self, queue_pause, params)
    }

    /// [`StoreTx::queue_resume`] in its own transaction.
    async fn queue_resume(&self, queue: String) -> StoreResult<bool> {
        in_tx!(self, queue_resume, queue)
    }

    /// [`StoreTx::leader_elect`] in its own transaction.
    async fn leader_elect(&self, params: crate::LeaderElect) -> StoreResult<crate::Leadership> {
        in_tx!(self, leader_elect, params)
    }

    /// [`StoreTx::leader_renew`] in its own transaction.
    async fn leader_renew(&self, params: crate::LeaderRenew) -> StoreResult<crate::Leadership> {
        in_tx!(self, leader_renew, params)
    }

    /// [`StoreTx::job_insert`] in its own transaction. A batch without enqueue keys goes
    /// through [`Store::job_insert_rows`], which a store may run as one statement.
    async fn job_insert(&self, params: JobInsert) -> StoreResult<Vec<Enqueued>> {
        if params.has_keys() {
            return in_tx!(self, job_insert, params);
        }
        let rows = self.job_insert_rows(params).await?;
        Ok(rows.into_iter().map(Enqueued::new).collect())
    }

    /// [`StoreTx::job_insert_rows`] in its own transaction.
    async fn job_insert_rows(&self, params: JobInsert) -> StoreResult<Vec<JobRow>> {
        in_tx!(self, job_insert_rows, params)
    }

    /// [`StoreTx::job_retry`] in its own transaction.
    async fn job_retry(&self, params: JobRetry) -> StoreResult<Vec<JobRow>> {
        in_tx!(self, job_retry, params)
    }

    /// [`StoreTx::job_discard`] in its own transaction.
    async fn job_discard(&self, params: JobDiscard) -> StoreResult<Vec<i64>> {
        in_tx!(self, job_discard, params)
    }

    /// [`StoreTx::purge`] in its own transaction.
    async fn purge(&self, params: Purge) -> StoreResult<u64> {
        in_tx!(self, purge, params)
    }

    /// How many records of `target` a purge with cutoff `before` would delete.
    async fn purge_count(&self, target: PurgeTarget, before: crate::Timestamp) -> StoreResult<u64>;

    /// [`StoreTx::job_claim`] in its own transaction.
    async fn job_claim(&self, params: JobClaim) -> StoreResult<Vec<JobRow>> {
        in_tx!(self, job_claim, params)
    }

    /// [`StoreTx::job_heartbeat`] in its own transaction.
    async fn job_heartbeat(&self, params: JobHeartbeat) -> StoreResult<Vec<LeaseRenewal>> {
        in_tx!(self, job_heartbeat, params)
    }

    /// [`StoreTx::job_complete`] in its own transaction.
    async fn job_complete(&self, params: JobComplete) -> StoreResult<JobRow> {
        in_tx!(self, job_complete, params)
    }

    /// [`StoreTx::job_complete_many`] in its own transaction.
    async fn job_complete_many(&self, params: JobCompleteMany) -> StoreResult<Vec<i64>> {
        in_tx!(self, job_complete_many, params)
    }

    /// [`StoreTx::job_fail`] in its own transaction.
    async fn job_fail(&self, params: JobFail) -> StoreResult<JobRow> {
        in_tx!(self, job_fail, params)
    }

    /// [`StoreTx::job_rescue`] in its own transaction.
    async fn job_rescue(&self, params: JobRescue) -> StoreResult<Vec<JobRow>> {
        in_tx!(self, job_rescue, params)
    }

    /// [`StoreTx::intent_begin`] in its own transaction.
    async fn intent_begin(&self, params: crate::IntentBegin) -> StoreResult<crate::IntentBegun> {
        in_tx!(self, intent_begin, params)
    }

    /// [`StoreTx::intent_renew`] in its own transaction.
    async fn intent_renew(&self, params: crate::IntentRenew) -> StoreResult<crate::IntentRow> {
        in_tx!(self, intent_renew, params)
    }

    /// [`StoreTx::intent_finish`] in its own transaction.
    async fn intent_finish(&self, params: crate::IntentFinish) -> StoreResult<crate::IntentRow> {
        in_tx!(self, intent_finish, params)
    }

    /// [`StoreTx::intent_resolve`] in its own transaction.
    async fn intent_resolve(&self, params: crate::IntentResolve) -> StoreResult<crate::IntentRow> {
        in_tx!(self, intent_resolve, params)
    }

    /// [`StoreTx::job_cancel`] in its own transaction.
    async fn job_cancel(&self, params: JobCancel) -> StoreResult<JobRow> {
        in_tx!(self, job_cancel, params)
    }

    /// [`StoreTx::batch_create`] in its own transaction.
    async fn batch_create(&self, params: BatchCreate) -> StoreResult<BatchAdded> {
        in_tx!(self, batch_create, params)
    }

    /// [`StoreTx::batch_add`] in its own transaction.
    async fn batch_add(&self, params: BatchAdd) -> StoreResult<BatchAdded> {
        in_tx!(self, batch_add, params)
    }

    /// [`StoreTx::batch_seal`] in its own transaction.
    async fn batch_seal(&self, params: BatchSeal) -> StoreResult<BatchRow> {
        in_tx!(self, batch_seal, params)
    }

    /// [`StoreTx::http_key_reserve`] in its own transaction.
    async fn http_key_reserve(
        &self,
        params: crate::HttpKeyReserve,
    ) -> StoreResult<crate::HttpKeyReserved> {
        in_tx!(self, http_key_reserve, params)
    }

    /// [`StoreTx::http_key_complete`] in its own transaction.
    async fn http_key_complete(&self, params: crate::HttpKeyComplete) -> StoreResult<bool> {
        in_tx!(self, http_key_complete, params)
    }

    /// [`StoreTx::http_key_release`] in its own transaction.
    async fn http_key_release(&self, params: crate::HttpKeyRelease) -> StoreResult<bool> {
        in_tx!(self, http_key_release, params)
    }
}

/// A subscription to announcements of waiting jobs from other processes.
#[async_trait]
pub trait Wakeups: Send {
    /// Waits for the next announcement; returns the queues it names (empty = any queue).
    /// An error means the subscription is broken; subscribe again.
    async fn next(&mut self) -> StoreResult<Vec<String>>;
}

/// An open write transaction. Dropping it without [`StoreTx::commit`] rolls it back.
#[async_trait]
pub trait StoreTx: Send {
    /// Which implementation this is.
    fn backend(&self) -> crate::Backend;

    /// Commits everything written in this transaction.
    async fn commit(self: Box<Self>) -> StoreResult<()>;

    /// Discards everything written in this transaction.
    async fn rollback(self: Box<Self>) -> StoreResult<()>;

    /// Test-only broken build `chaos-break-effect-key`: commits everything written so far
    /// and goes on in a new transaction on the same connection (SQLite: on the writer it
    /// already holds), so an effect key claimed so far commits before its effect. Nothing
    /// else may call it.
    #[cfg(feature = "chaos-break-effect-key")]
    async fn restart_for_chaos(&mut self) -> StoreResult<()> {
        Err(crate::StoreError::Invalid(
            "this store cannot restart a transaction (chaos-break-effect-key)".into(),
        ))
    }

    /// Inserts jobs; returns them in the order given. A job whose `run_at` is after `now`
    /// is `scheduled`, otherwise `available`. A job whose `(queue, enqueue_key)` is held
    /// inside the window returns the holding job, marked deduplicated, and inserts
    /// nothing (see [`crate::enqueue`]).
    async fn job_insert(&mut self, params: JobInsert) -> StoreResult<Vec<Enqueued>> {
        crate::enqueue::insert(self, params).await
    }

    /// Inserts jobs in one statement, ignoring their enqueue keys; returns the rows in the
    /// order given. The building block of [`StoreTx::job_insert`].
    async fn job_insert_rows(&mut self, params: JobInsert) -> StoreResult<Vec<JobRow>>;

    /// Takes enqueue keys for new jobs in one statement: a key not held, or held since
    /// before the window, is (re)assigned to the new job. Returns the ids of the jobs
    /// that got their key.
    async fn enqueue_key_take(&mut self, params: EnqueueKeyTake) -> StoreResult<Vec<i64>>;

    /// The job holding each `(queue, key)` given: `(queue, key, job_id)`.
    async fn enqueue_key_find(
        &mut self,
        keys: Vec<(String, String)>,
    ) -> StoreResult<Vec<(String, String, i64)>>;

    /// Pauses a queue: claims from it return nothing until it is resumed; enqueues into
    /// it go on. `false` when it was paused already (its first pause is kept).
    async fn queue_pause(&mut self, params: crate::QueuePause) -> StoreResult<bool>;

    /// Resumes a paused queue; `false` when it was not paused.
    async fn queue_resume(&mut self, queue: String) -> StoreResult<bool>;

    /// Elects the candidate when nobody leads `name` now (no row yet, or the lease
    /// ended): it leads under the next fence until now + ttl. Returns who leads after the
    /// attempt, the candidate or the leader in force (see [`crate::leader`]).
    async fn leader_elect(&mut self, params: crate::LeaderElect) -> StoreResult<crate::Leadership>;

    /// Extends the leadership of `params.token` to now + ttl (0 ends it now) when it is
    /// still current; [`crate::StoreError::LeadershipLost`] otherwise.
    async fn leader_renew(&mut self, params: crate::LeaderRenew) -> StoreResult<crate::Leadership>;

    /// Checks that `token` leads now (`now`, else the database clock) and holds its row
    /// until this transaction ends, so no other process is elected before the writes
    /// made after it commit; [`crate::StoreError::LeadershipLost`] otherwise.
    async fn leader_check(
        &mut self,
        token: crate::LeaderToken,
        now: Option<crate::Timestamp>,
    ) -> StoreResult<()>;

    /// Gives back the claims in `leases`, jobs this transaction inserted claimed for a
    /// local worker, whose queue is paused now (available, attempt 0, no lease, the
    /// fence kept); their ids. Run last before the commit of such an enqueue.
    async fn job_unclaim_paused(&mut self, leases: Vec<crate::LeaseToken>)
    -> StoreResult<Vec<i64>>;

    /// Deletes jobs just inserted in this transaction (an enqueue that lost its key).
    async fn job_delete(&mut self, ids: Vec<i64>) -> StoreResult<u64>;

    /// The listed jobs, in id order, read in this transaction.
    async fn job_get_many(&mut self, ids: Vec<i64>) -> StoreResult<Vec<JobRow>>;

    /// Puts dead or cancelled jobs back to `available` now, with attempt 0 and no
    /// snoozes (a fresh start); their attempt history and fence are kept. Returns the
    /// jobs changed. A child of a batch leaves its batch's counts.
    async fn job_retry(&mut self, params: JobRetry) -> StoreResult<Vec<JobRow>> {
        let now = params.now;
        let rows = self.job_retry_rows(params).await?;
        reopened(self, rows, now).await
    }

    /// The statement of [`StoreTx::job_retry`], without the batch counts: each job
    /// changed, with the state it left (read under its row lock).
    async fn job_retry_rows(&mut self, params: JobRetry) -> StoreResult<Vec<(JobRow, JobState)>>;

    /// Marks dead job `job_id` as awaiting intent `key` (its call's outcome is unknown),
    /// in the transaction that wrote it dead; [`StoreTx::job_put_back`] of that key, and
    /// nothing else, puts it back to run. `false` when the job is not dead.
    async fn job_await_intent(&mut self, job_id: i64, key: String) -> StoreResult<bool>;

    /// Puts every dead job awaiting intent `params.key` back to `available` now, as
    /// [`StoreTx::job_retry`] would (a child of a batch leaves its batch's counts).
    /// Returns the jobs changed.
    async fn job_put_back(&mut self, params: crate::JobPutBack) -> StoreResult<Vec<JobRow>> {
        let now = params.now;
        let rows = self.job_put_back_rows(params).await?;
        let rows = rows.into_iter().map(|j| (j, JobState::Dead)).collect();
        reopened(self, rows, now).await
    }

    /// The statement of [`StoreTx::job_put_back`], without the batch counts.
    async fn job_put_back_rows(&mut self, params: crate::JobPutBack) -> StoreResult<Vec<JobRow>>;

    /// Deletes dead jobs with their attempt history and enqueue keys; returns the ids
    /// deleted.
    async fn job_discard(&mut self, params: JobDiscard) -> StoreResult<Vec<i64>>;

    /// Deletes up to `params.limit` records of `params.target` older than
    /// `params.before`, oldest first; returns how many (jobs, not their attempts).
    async fn purge(&mut self, params: Purge) -> StoreResult<u64>;

    /// Claims up to `limit` claimable jobs of a queue (available, or scheduled/retryable
    /// with `run_at` reached) in priority, `run_at`, id order, in one statement. Each
    /// claimed job becomes `running`, its attempt and fence go up by one, and its lease
    /// runs to `now + lease_ms`. Rows locked by another claim are skipped.
    async fn job_claim(&mut self, params: JobClaim) -> StoreResult<Vec<JobRow>>;

    /// Extends every listed lease that is still current (running, same fence) in one
    /// statement; the result lists those extended. A missing one has been lost.
    async fn job_heartbeat(&mut self, params: JobHeartbeat) -> StoreResult<Vec<LeaseRenewal>>;

    /// Checks that the claim is current and locks the job's row until the transaction
    /// ends, so no rescue or reclaim can interleave. The fence check that opens every
    /// effect transaction. [`crate::StoreError::LeaseLost`] when not current.
    async fn job_lock(&mut self, params: crate::JobLock) -> StoreResult<JobRow>;

    /// Completes a running job under its current fence and records the attempt; a child
    /// of a batch moves its batch's counts (and may enqueue its successor, see
    /// [`crate::batch`]). [`crate::StoreError::LeaseLost`] when the claim is not current.
    async fn job_complete(&mut self, params: JobComplete) -> StoreResult<JobRow> {
        let now = params.now;
        let job = self.job_complete_row(params).await?;
        settle_one(self, &job, now).await?;
        Ok(job)
    }

    /// The statement of [`StoreTx::job_complete`], without the batch counts.
    async fn job_complete_row(&mut self, params: JobComplete) -> StoreResult<JobRow>;

    /// Completes many running jobs, each under its own fence, in one statement, and
    /// records their attempts (in the same statement or one more, as the dialect allows);
    /// returns the ids completed, in no particular order. A lease absent from the result
    /// was not current: nothing was written for it. Children of batches move their
    /// batches' counts, one statement per batch.
    async fn job_complete_many(&mut self, params: JobCompleteMany) -> StoreResult<Vec<i64>> {
        let now = params.now;
        let done = self.job_complete_many_rows(params).await?;
        let mut tally = BatchTally::default();
        for c in &done {
            tally.finished(c.job_id, c.batch_id, JobState::Completed);
        }
        crate::batch::settle(self, tally, now).await?;
        Ok(done.into_iter().map(|c| c.job_id).collect())
    }

    /// The statement(s) of [`StoreTx::job_complete_many`], without the batch counts.
    async fn job_complete_many_rows(
        &mut self,
        params: JobCompleteMany,
    ) -> StoreResult<Vec<crate::Completed>>;

    /// Records a failed attempt under the current fence: `retryable` at
    /// `now + retry_in_ms`, or `dead` when `retry_in_ms` is `None` (a dead child moves
    /// its batch's counts). [`crate::StoreError::LeaseLost`] when the claim is not
    /// current.
    async fn job_fail(&mut self, params: JobFail) -> StoreResult<JobRow> {
        let now = params.now;
        let job = self.job_fail_row(params).await?;
        settle_one(self, &job, now).await?;
        Ok(job)
    }

    /// The statement of [`StoreTx::job_fail`], without the batch counts.
    async fn job_fail_row(&mut self, params: JobFail) -> StoreResult<JobRow>;

    /// Records a failed attempt like [`StoreTx::job_fail`], for a job that stops to await
    /// intent `key` (its call's outcome is unknown). When the failure makes the job dead,
    /// the job is marked as awaiting the key, then the intent is read under a lock: if it
    /// was settled meanwhile (a resolution found the job running and left it), the job is
    /// put back to run instead and its batch is left alone (it never finished). The job's
    /// row is locked first, then the intent, then its batch's row; a resolution locks the
    /// intent, then the jobs awaiting it, then their batches, so the two never wait for
    /// each other in a cycle, and one of them sees the other's write.
    async fn job_fail_awaiting(
        &mut self,
        params: JobFail,
        key: String,
    ) -> StoreResult<(JobRow, crate::Awaited)> {
        let now = params.now;
        let job = self.job_fail_row(params).await?;
        if job.state != JobState::Dead {
            settle_one(self, &job, now).await?;
            return Ok((job, crate::Awaited::NotDead));
        }
        self.job_await_intent(job.id, key.clone()).await?;
        let awaited = match self.intent_lock(key.clone()).await? {
            Some(intent) if intent.state.awaits_settlement() => crate::Awaited::Waits,
            Some(_) => crate::Awaited::PutBack,
            None => crate::Awaited::Gone,
        };
        if awaited != crate::Awaited::PutBack {
            settle_one(self, &job, now).await?;
            return Ok((job, awaited));
        }
        let back = self
            .job_put_back_rows(crate::JobPutBack { key, now })
            .await?;
        let (mine, others): (Vec<JobRow>, Vec<JobRow>) =
            back.into_iter().partition(|j| j.id == job.id);
        // Any other job put back with it was counted dead in its batch.
        let others = others.into_iter().map(|j| (j, JobState::Dead)).collect();
        reopened(self, others, now).await?;
        Ok((
            mine.into_iter().next().unwrap_or(job),
            crate::Awaited::PutBack,
        ))
    }

    /// Moves running jobs whose lease expired before `now` to `retryable` (or `dead`
    /// when their attempts are used up) and records each lost attempt.
    async fn job_rescue(&mut self, params: JobRescue) -> StoreResult<Vec<JobRow>> {
        let now = params.now;
        let jobs = self.job_rescue_rows(params).await?;
        let mut tally = BatchTally::default();
        for job in &jobs {
            tally.finished(job.id, job.batch_id, job.state);
        }
        crate::batch::settle(self, tally, now).await?;
        Ok(jobs)
    }

    /// The statement of [`StoreTx::job_rescue`], without the batch counts.
    async fn job_rescue_rows(&mut self, params: JobRescue) -> StoreResult<Vec<JobRow>>;

    /// Cancels an unfinished job; a running job's claim is thereby fenced out, and a
    /// child counts as finished (cancelled) in its batch.
    /// [`crate::StoreError::NotFound`] or [`crate::StoreError::Conflict`] (already finished).
    async fn job_cancel(&mut self, params: JobCancel) -> StoreResult<JobRow> {
        let now = params.now;
        let job = self.job_cancel_row(params).await?;
        settle_one(self, &job, now).await?;
        Ok(job)
    }

    /// The statements of [`StoreTx::job_cancel`], without the batch counts.
    async fn job_cancel_row(&mut self, params: JobCancel) -> StoreResult<JobRow>;

    /// Creates a batch with its first children, sealed if asked (see [`crate::batch`]).
    async fn batch_create(&mut self, params: BatchCreate) -> StoreResult<BatchAdded> {
        crate::batch::create(self, params).await
    }

    /// Adds children to an open batch.
    async fn batch_add(&mut self, params: BatchAdd) -> StoreResult<BatchAdded> {
        crate::batch::add(self, params).await
    }

    /// Seals a batch; one whose children all finished enqueues its successor now.
    async fn batch_seal(&mut self, params: BatchSeal) -> StoreResult<BatchRow> {
        crate::batch::seal(self, params).await
    }

    /// Inserts a batch row, open and empty (`batch/insert.sql`).
    async fn batch_insert(&mut self, params: crate::BatchInsert) -> StoreResult<BatchRow>;

    /// Locks every shard row of a batch, in shard order, to the end of the transaction.
    async fn batch_shards_lock(&mut self, batch_id: i64) -> StoreResult<()>;

    /// Adds to the totals of a batch's shards (creating their rows), locking them.
    async fn batch_shards_add(&mut self, params: BatchCount) -> StoreResult<()>;

    /// Moves the counts of a batch's existing shards, locking them to the end of the
    /// transaction; returns the shards touched that are complete now (every child
    /// finished).
    async fn batch_count(&mut self, params: BatchCount) -> StoreResult<Vec<i32>>;

    /// Locks the batch row to the end of the transaction; false when it is missing (or,
    /// with `open_only`, not open).
    async fn batch_lock(&mut self, batch_id: i64, open_only: bool) -> StoreResult<bool>;

    /// Seals an open batch; false when it is not open or missing.
    async fn batch_seal_row(&mut self, params: BatchSeal) -> StoreResult<bool>;

    /// Marks a sealed batch without a successor, every child finished, finished; false
    /// otherwise.
    async fn batch_finish(&mut self, params: crate::BatchFinish) -> StoreResult<bool>;

    /// A batch with its counts summed over its shards, read in this transaction by a
    /// statement of its own (so, on PostgreSQL, after any lock taken before it).
    async fn batch_get(&mut self, batch_id: i64) -> StoreResult<Option<BatchRow>>;

    /// Claims an effect key in this transaction (`INSERT … ON CONFLICT DO NOTHING`):
    /// [`crate::EffectClaimed::New`] when this transaction inserted it, else the existing
    /// record. Run it after [`StoreTx::job_lock`], so a stale claim never gets this far.
    async fn effect_claim(
        &mut self,
        params: crate::EffectClaim,
    ) -> StoreResult<crate::EffectClaimed>;

    /// Posts a ledger entry and moves its account's running total, in this transaction,
    /// guarded by the claim's fence: [`crate::LedgerPosted::Duplicate`] (nothing changed)
    /// when the entry key exists; [`crate::StoreError::LeaseLost`] when the claim is stale.
    async fn ledger_post(&mut self, params: crate::LedgerPost) -> StoreResult<crate::LedgerPosted>;

    /// The effect keys of the claim's job and of `params.kind` recorded under another key
    /// than `params.key` (at most 10): what the job's earlier attempts committed. Used to
    /// detect keys that change between attempts.
    async fn effect_others(&mut self, params: crate::EffectClaim) -> StoreResult<Vec<String>>;

    /// Returns the number effect key `key` has on `counter`, or assigns it the counter's
    /// next one, in this transaction, guarded by the claim's fence.
    async fn counter_next(
        &mut self,
        params: crate::CounterNext,
    ) -> StoreResult<crate::CounterAssigned>;

    /// Reserves an intent (see [`crate::IntentBegun`]) in one conditional write on its
    /// key: inserts it, takes a `released` one, or takes over an `in_progress` one whose
    /// lease ended before `now` (an unkeyed one goes to `unknown` instead), when the
    /// fingerprint matches, only if
    /// `params.job` is the job's current claim, checked in the same statement.
    /// [`crate::StoreError::LeaseLost`] when the claim is not current.
    async fn intent_begin(&mut self, params: crate::IntentBegin)
    -> StoreResult<crate::IntentBegun>;

    /// Extends an `in_progress` intent's lease, under its fence, while the lease has not
    /// ended. [`crate::StoreError::IntentLost`] otherwise.
    async fn intent_renew(&mut self, params: crate::IntentRenew) -> StoreResult<crate::IntentRow>;

    /// Records the holder's outcome of an `in_progress` intent under its fence; returns
    /// the row. [`crate::StoreError::IntentLost`] when the fence no longer holds it.
    async fn intent_finish(&mut self, params: crate::IntentFinish)
    -> StoreResult<crate::IntentRow>;

    /// Resolves an intent from one of `params.from` states at `params.token.fence`;
    /// fence + 1. Returns the row.
    /// [`crate::StoreError::Conflict`] when its state or fence moved on,
    /// [`crate::StoreError::NotFound`] when it does not exist.
    async fn intent_resolve(
        &mut self,
        params: crate::IntentResolve,
    ) -> StoreResult<crate::IntentRow>;

    /// Reads intent `key` and keeps it from being resolved until this transaction ends,
    /// so a decision taken on its state here cannot cross a resolution committed
    /// meanwhile (a job written dead to await it is put back in the same transaction).
    async fn intent_lock(&mut self, key: String) -> StoreResult<Option<crate::IntentRow>>;

    /// Reserves an Idempotency-Key for a request in one conditional write on
    /// `(principal, key)` (see [`crate::HttpKeyReserved`]): inserts it, or takes (fence + 1)
    /// a row that is `released`, older than `retention_ms`, or `in_progress` with its lock
    /// expired before `now` and the same fingerprint; otherwise returns the row as it is.
    async fn http_key_reserve(
        &mut self,
        params: crate::HttpKeyReserve,
    ) -> StoreResult<crate::HttpKeyReserved>;

    /// Stores the response of the request holding the key at `params.fence` and marks it
    /// `completed`. `false`, changing nothing, when the row is no longer `in_progress` at
    /// that fence.
    async fn http_key_complete(&mut self, params: crate::HttpKeyComplete) -> StoreResult<bool>;

    /// Marks the key `released` when it is `in_progress` at `params.fence`; `false`,
    /// changing nothing, otherwise.
    async fn http_key_release(&mut self, params: crate::HttpKeyRelease) -> StoreResult<bool>;

    /// Sets the running total of each listed account to the sum of its entries.
    async fn ledger_rebuild(&mut self, accounts: Vec<crate::LedgerMismatch>) -> StoreResult<()>;

    /// Runs a caller's statement in this transaction; returns the rows affected.
    /// Placeholders are `$1`, `$2`, … on every store.
    async fn execute(&mut self, sql: &str, args: &[SqlValue]) -> StoreResult<u64>;

    /// Runs a caller's query in this transaction; returns rows of values.
    async fn query(&mut self, sql: &str, args: &[SqlValue]) -> StoreResult<Vec<Vec<SqlValue>>>;

    /// The concrete transaction, for callers that need the driver's own API
    /// (downcast to the store crate's transaction type).
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// Gives the batches of `rows` (jobs put back to run, each with the state it left) their
/// counts back; returns the jobs.
async fn reopened<T: StoreTx + ?Sized>(
    tx: &mut T,
    rows: Vec<(JobRow, JobState)>,
    now: Option<Timestamp>,
) -> StoreResult<Vec<JobRow>> {
    let mut tally = BatchTally::default();
    for (job, was) in &rows {
        tally.reopened(job.id, job.batch_id, *was);
    }
    crate::batch::settle(tx, tally, now).await?;
    Ok(rows.into_iter().map(|(job, _)| job).collect())
}

/// Settles the batch of one job that a statement just moved to `job.state`.
async fn settle_one<T: StoreTx + ?Sized>(
    tx: &mut T,
    job: &JobRow,
    now: Option<Timestamp>,
) -> StoreResult<()> {
    if job.batch_id.is_none() || !job.state.is_finished() {
        return Ok(());
    }
    let mut tally = BatchTally::default();
    tally.finished(job.id, job.batch_id, job.state);
    crate::batch::settle(tx, tally, now).await
}
