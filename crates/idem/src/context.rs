//! [`JobContext`]: what a running handler holds, and [`EffectTx`], the fenced transaction
//! in which a `Transactional` handler's effects commit together with the job's completion.
//!
//! Invariant: an [`EffectTx`] exists only after the store confirmed, inside that same
//! transaction, that this claim's fence is current, and it keeps the job's row locked
//! until commit; so either the effects and the completion commit together under a
//! current claim, or nothing commits. (Not in the test-only broken builds, which break
//! this on purpose: see ARCHITECTURE.md, "Test-only broken builds".)

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

use idem_store::{
    CounterAssigned, CounterNext, EffectClaim, EffectClaimed, Enqueued, JobComplete, JobLock,
    JobRow, LeaseToken, LedgerPost, LedgerPosted, SqlValue, Store, StoreTx,
};

use crate::client::Idem;
use crate::effect::EffectKey;
use crate::error::IdemError;
use crate::job::Job;

/// Raised by the worker's heartbeat when it finds a claim no longer current.
#[derive(Debug, Default)]
pub(crate) struct LeaseSignal {
    lost: AtomicBool,
    /// The job's completion is written in its own transaction, which holds its row until
    /// the commit: a heartbeat that then finds the claim gone most likely found it
    /// completed, which is no news to log. Cleared when that commit fails.
    completing: AtomicBool,
    notify: Notify,
}

impl LeaseSignal {
    /// Raises the signal; returns whether that is no news to log: it was raised already,
    /// or the job's completion is being committed.
    pub(crate) fn raise(&self) -> bool {
        let was = self.lost.swap(true, Ordering::AcqRel);
        self.notify.notify_waiters();
        was || self.completing.load(Ordering::Acquire)
    }

    fn is_raised(&self) -> bool {
        // chaos-break-fence: the handler never hears that its lease is lost, so a stale
        // handler goes on to commit (the heartbeat still logs the loss).
        #[cfg(feature = "chaos-break-fence")]
        return false;
        #[cfg(not(feature = "chaos-break-fence"))]
        self.lost.load(Ordering::Acquire)
    }

    async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_raised() {
                return;
            }
            notified.await;
        }
    }
}

/// What a running handler holds: its job, its claim, and access to the store.
pub struct JobContext {
    /// Shared with the worker's task that runs the job (no copy per attempt).
    job: Arc<JobRow>,
    pub(crate) idem: Idem,
    lease_lost: Arc<LeaseSignal>,
    /// The worker's lease: how long the effect transaction may sit idle (PostgreSQL).
    lease_length: std::time::Duration,
    pub(crate) completed: bool,
    /// The handler's effect class, which decides how its intents behave.
    pub(crate) effect: crate::handler::EffectClass,
    /// The handler's call timing, which sets its intents' lease.
    pub(crate) intent_policy: crate::intent::IntentPolicy,
    /// What the job completes with ([`JobContext::set_result`]).
    pub(crate) result: Option<serde_json::Value>,
}

/// The largest result a job may complete with, as JSON text.
pub const MAX_RESULT_BYTES: usize = 64 * 1024;

/// Checks a job's result: at most [`MAX_RESULT_BYTES`] as JSON text, and no NUL character
/// in a string or a key, which PostgreSQL's `jsonb` cannot store.
pub(crate) fn check_result(result: &serde_json::Value) -> Result<(), IdemError> {
    if has_nul(result) {
        return Err(IdemError::InvalidJob(
            "a job's result holds a NUL character, which PostgreSQL cannot store; encode \
             binary data (e.g. as base64) before returning it"
                .into(),
        ));
    }
    let len = serde_json::to_string(result)
        .map(|t| t.len())
        .unwrap_or(usize::MAX);
    if len > MAX_RESULT_BYTES {
        return Err(IdemError::InvalidJob(format!(
            "a job's result is {len} bytes of JSON; at most {MAX_RESULT_BYTES} are kept \
             (store large outputs in your own table and return their key)"
        )));
    }
    Ok(())
}

fn has_nul(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::String(s) => s.contains('\0'),
        serde_json::Value::Array(a) => a.iter().any(has_nul),
        serde_json::Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

impl JobContext {
    pub(crate) fn new(
        job: Arc<JobRow>,
        idem: Idem,
        lease_lost: Arc<LeaseSignal>,
        lease_length: std::time::Duration,
    ) -> Self {
        JobContext {
            job,
            idem,
            lease_lost,
            lease_length,
            completed: false,
            effect: crate::handler::EffectClass::Transactional,
            intent_policy: crate::intent::IntentPolicy::default(),
            result: None,
        }
    }

    /// Sets what the job completes with (kept as its `result`, at most
    /// [`MAX_RESULT_BYTES`] of JSON): a batch's successor reads its children's results.
    /// The completion that follows keeps it, whether the handler completes in its
    /// effect transaction or returns `Ok` and the worker completes the job.
    pub fn set_result(&mut self, result: serde_json::Value) -> Result<(), IdemError> {
        check_result(&result)?;
        self.result = Some(result);
        Ok(())
    }

    /// A page of the children of the batch this job is the successor of, in id order
    /// (their states, results and errors): ids above `after` (`None` = from the first),
    /// at most `limit`; empty for a job that follows no batch.
    pub async fn batch_children(
        &self,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<JobRow>, IdemError> {
        match self.job.follows_batch {
            Some(id) => self.idem.batch_children(id, after, limit).await,
            None => Ok(Vec::new()),
        }
    }

    /// The batch this job is the successor of, with its counts (a bounded summary of
    /// its children's outcomes); `None` for a job that follows no batch. Read the
    /// children a page at a time with [`Idem::batch_children`].
    pub async fn batch(&self) -> Result<Option<idem_store::BatchRow>, IdemError> {
        match self.job.follows_batch {
            Some(id) => Ok(self.idem.store.batch_get(id).await?),
            None => Ok(None),
        }
    }

    /// The job as it was claimed (attempt and fence of this claim).
    pub fn job(&self) -> &JobRow {
        &self.job
    }

    /// This claim: the job id and its fence.
    pub fn lease(&self) -> LeaseToken {
        self.job.lease_token()
    }

    /// Whether a heartbeat has found this claim lost. A handler doing long work can
    /// check this and stop early; its writes would be refused anyway.
    pub fn is_lease_lost(&self) -> bool {
        self.lease_lost.is_raised()
    }

    /// Resolves when a heartbeat finds this claim lost (never, if it stays current). A
    /// long handler can `select!` on it to stop work whose result would be refused.
    pub async fn lease_lost(&self) {
        self.lease_lost.wait().await
    }

    /// The store, for reads outside the effect transaction.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.idem.store
    }

    /// Opens the fenced effect transaction: the fence check runs first and locks the
    /// job's row; a stale claim gets an error for which
    /// [`IdemError::is_lease_lost`] is true, and nothing can be written. On PostgreSQL
    /// the transaction may sit idle between statements for at most the worker's lease:
    /// a stalled holder (a paused process) then loses its session, which rolls the
    /// transaction back and releases the job for the rescuer.
    pub async fn begin(&mut self) -> Result<EffectTx<'_>, IdemError> {
        let mut tx = self.idem.store.begin().await?;
        tx.job_lock(self.job_lock()).await?;
        Ok(EffectTx {
            tx,
            cx: self,
            queues: BTreeSet::new(),
        })
    }

    /// The fence check that opens this claim's effect transaction.
    fn job_lock(&self) -> JobLock {
        JobLock {
            lease: self.lease(),
            // PostgreSQL's setting is an int of milliseconds (about 24.8 days at most).
            idle_timeout_ms: Some(crate::client::millis(self.lease_length).min(i32::MAX.into())),
        }
    }
}

/// The fenced transaction of one claim. Dropping it without [`EffectTx::complete`] or
/// [`EffectTx::commit`] rolls everything back.
pub struct EffectTx<'a> {
    tx: Box<dyn StoreTx>,
    cx: &'a mut JobContext,
    /// Queues that jobs enqueued in this transaction wait in; woken after commit.
    queues: BTreeSet<String>,
}

impl<'a> EffectTx<'a> {
    /// The job as it was claimed: its id, kind, args, this attempt's number and this
    /// claim's fence (the row [`JobContext::job`] gives).
    pub fn job(&self) -> &JobRow {
        self.cx.job()
    }

    /// The claim this transaction is fenced by: the job's id and its fence, which every
    /// write in this transaction carries (what [`JobContext::lease`] gives). A
    /// handler can store it with its effect, to tell later which claim made it.
    pub fn lease(&self) -> LeaseToken {
        self.cx.lease()
    }

    /// Runs a statement of the effect (placeholders `$1`, `$2`, …).
    pub async fn execute(&mut self, sql: &str, args: &[SqlValue]) -> Result<u64, IdemError> {
        Ok(self.tx.execute(sql, args).await?)
    }

    /// Runs a query in the effect transaction.
    pub async fn query(
        &mut self,
        sql: &str,
        args: &[SqlValue],
    ) -> Result<Vec<Vec<SqlValue>>, IdemError> {
        Ok(self.tx.query(sql, args).await?)
    }

    /// Claims the effect `key` in this transaction: [`EffectClaimed::New`] means this
    /// execution owns the effect and must make it in this same transaction;
    /// [`EffectClaimed::Done`] means it was already made (the record says by which job
    /// and when), so make nothing. The key's record commits or rolls back with the
    /// effect, and the store's unique key decides every race.
    ///
    /// The same receipt requested twice makes one outbox row:
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use idem::{EffectClass, EffectKey, Handler, Idem, Job, JobContext, JobError, WorkerConfig};
    /// use tokio::sync::mpsc;
    ///
    /// struct ReceiptMail {
    ///     done: mpsc::UnboundedSender<bool>, // tells the example a job finished
    /// }
    ///
    /// impl Handler for ReceiptMail {
    ///     const KIND: &'static str = "receipt-mail";
    ///     const EFFECT: EffectClass = EffectClass::Transactional;
    ///     type Args = i64; // the order id
    ///
    ///     async fn run(&self, cx: &mut JobContext, order_id: i64) -> Result<(), JobError> {
    ///         let mut tx = cx.begin().await?;
    ///         let key = EffectKey::new("receipt-mail").part(order_id);
    ///         let new = tx.claim_effect(&key).await?.is_new();
    ///         if new {
    ///             let sql = "INSERT INTO outbox (order_id) VALUES ($1)";
    ///             tx.execute(sql, &[order_id.into()]).await?;
    ///         }
    ///         tx.complete().await?; // key, row and completion commit together
    ///         let _ = self.done.send(new);
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let idem = Idem::connect(&format!("sqlite://{}/idem.db", dir.path().display())).await?;
    /// # let mut setup = idem.begin().await?;
    /// # setup.execute("CREATE TABLE outbox (order_id BIGINT NOT NULL)", &[]).await?;
    /// # setup.commit().await?;
    /// for _ in 0..2 {
    ///     idem.enqueue(Job::new("receipt-mail", serde_json::json!(42))).await?;
    /// }
    /// let (done, mut finished) = mpsc::unbounded_channel();
    /// let mut worker = idem.worker(WorkerConfig::default())?;
    /// worker.register(ReceiptMail { done })?;
    /// let running = worker.start();
    /// let mut news = Vec::new();
    /// for _ in 0..2 {
    ///     news.push(tokio::time::timeout(Duration::from_secs(30), finished.recv()).await?);
    /// }
    /// running.shutdown().await;
    ///
    /// news.sort();
    /// assert_eq!(news, [Some(false), Some(true)]); // one made the mail, one found it done
    /// let rows = idem.store().query("SELECT count(*) FROM outbox", &[]).await?;
    /// assert_eq!(rows[0][0].as_i64(), Some(1));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn claim_effect(&mut self, key: &EffectKey) -> Result<EffectClaimed, IdemError> {
        let params = EffectClaim {
            key: key.render()?,
            kind: key.kind().to_owned(),
            lease: self.cx.lease(),
            now: self.cx.idem.clock.now(),
        };
        if self.cx.job.attempt > 1 {
            self.check_stable(&params).await?;
        }
        let claimed = self.tx.effect_claim(params).await?;
        if !claimed.is_new() {
            crate::telemetry::metrics::effect_key_hit(key.kind());
        }
        #[cfg(feature = "chaos-break-effect-key")]
        if claimed.is_new() {
            self.commit_early_for_chaos().await?;
        }
        Ok(claimed)
    }

    /// chaos-break-effect-key: commits what this transaction wrote so far (the key just
    /// claimed) on its own, then goes on in a new transaction on the same connection,
    /// opened with the fence check again, so the handler's next writes and the job's
    /// completion commit later, or never.
    #[cfg(feature = "chaos-break-effect-key")]
    async fn commit_early_for_chaos(&mut self) -> Result<(), IdemError> {
        self.tx.restart_for_chaos().await?;
        self.tx.job_lock(self.cx.job_lock()).await?;
        Ok(())
    }

    /// On a retry: warns and counts when an earlier attempt of this job committed a
    /// different key of the same kind (the key changes between attempts).
    async fn check_stable(&mut self, params: &EffectClaim) -> Result<(), IdemError> {
        let others = self.tx.effect_others(params.clone()).await?;
        if !others.is_empty() {
            self.cx.idem.metrics.unstable_effect_key(&params.kind);
            tracing::warn!(
                job_id = params.lease.job_id,
                attempt = self.cx.job.attempt,
                kind = %params.kind,
                key = %params.key,
                earlier = ?others,
                "unstable effect key: an earlier attempt of this job committed another key of \
                 the same kind; build keys from the request's identity, never from an attempt \
                 number, a fence or a timestamp"
            );
        }
        Ok(())
    }

    /// Posts a ledger entry keyed by the identity of the event it records
    /// (`EffectKey::new("transfer").part(id).part("debit")`) and moves `account`'s running
    /// total by `amount`, in this transaction. A duplicate post (the key exists) changes
    /// nothing and answers [`LedgerPosted::Duplicate`] with the entry that was posted.
    ///
    /// The same transfer delivered twice moves the money once:
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use idem::{EffectClass, EffectKey, Handler, Idem, Job, JobContext, JobError, WorkerConfig};
    /// use tokio::sync::mpsc;
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Transfer {
    ///     id: i64,
    ///     from: String,
    ///     to: String,
    ///     amount: i64,
    /// }
    ///
    /// struct PostTransfer {
    ///     done: mpsc::UnboundedSender<bool>, // tells the example a job finished
    /// }
    ///
    /// impl Handler for PostTransfer {
    ///     const KIND: &'static str = "transfer";
    ///     const EFFECT: EffectClass = EffectClass::Transactional;
    ///     type Args = Transfer;
    ///
    ///     async fn run(&self, cx: &mut JobContext, t: Transfer) -> Result<(), JobError> {
    ///         let mut tx = cx.begin().await?;
    ///         let key = |side: &str| EffectKey::new("transfer").part(t.id).part(side);
    ///         let debit = tx.ledger_post(&key("debit"), &t.from, -t.amount).await?;
    ///         let credit = tx.ledger_post(&key("credit"), &t.to, t.amount).await?;
    ///         tx.complete().await?; // entries, totals and completion commit together
    ///         let _ = self.done.send(debit.is_new() && credit.is_new());
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let idem = Idem::connect(&format!("sqlite://{}/idem.db", dir.path().display())).await?;
    /// let transfer = serde_json::json!({"id": 7, "from": "alice", "to": "bob", "amount": 100});
    /// for _ in 0..2 {
    ///     idem.enqueue(Job::new("transfer", transfer.clone())).await?;
    /// }
    /// let (done, mut finished) = mpsc::unbounded_channel();
    /// let mut worker = idem.worker(WorkerConfig::default())?;
    /// worker.register(PostTransfer { done })?;
    /// let running = worker.start();
    /// let mut news = Vec::new();
    /// for _ in 0..2 {
    ///     news.push(tokio::time::timeout(Duration::from_secs(30), finished.recv()).await?);
    /// }
    /// running.shutdown().await;
    ///
    /// news.sort();
    /// assert_eq!(news, [Some(false), Some(true)]); // the second post changed nothing
    /// let sql = "SELECT account, balance FROM idem_ledger_balance ORDER BY account";
    /// let rows = idem.store().query(sql, &[]).await?;
    /// let balances: Vec<_> = rows.iter().map(|r| (r[0].as_str(), r[1].as_i64())).collect();
    /// assert_eq!(balances, [(Some("alice"), Some(-100)), (Some("bob"), Some(100))]);
    /// assert!(idem.ledger_verify().await?.is_empty()); // totals equal their entries
    /// # Ok(())
    /// # }
    /// ```
    pub async fn ledger_post(
        &mut self,
        entry: &EffectKey,
        account: &str,
        amount: i64,
    ) -> Result<LedgerPosted, IdemError> {
        check_account(account)?;
        let params = LedgerPost {
            entry_key: entry.render()?,
            account: account.to_owned(),
            amount,
            lease: self.cx.lease(),
            now: self.cx.idem.clock.now(),
        };
        let posted = self.tx.ledger_post(params).await?;
        if !posted.is_new() {
            crate::telemetry::metrics::effect_key_hit(entry.kind());
        }
        #[cfg(feature = "chaos-break-effect-key")]
        if posted.is_new() {
            self.commit_early_for_chaos().await?;
        }
        Ok(posted)
    }

    /// The number of `counter` that belongs to the effect `key`: the counter's next one the
    /// first time, committed with the effect, and the same number on every later call for
    /// the same key (a retry of an effect already done). An attempt that rolls back gives
    /// its number back, so retries leave no gaps, unlike a database sequence, whose
    /// `nextval` is never rolled back.
    ///
    /// Invoices for orders 7 and 8, with order 7's job delivered twice, get the numbers 1
    /// and 2; the repeat gets order 7's number again:
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use idem::{EffectClass, EffectKey, Handler, Idem, Job, JobContext, JobError, WorkerConfig};
    /// use tokio::sync::mpsc;
    ///
    /// struct Invoice {
    ///     done: mpsc::UnboundedSender<(i64, i64, bool)>, // tells the example a job finished
    /// }
    ///
    /// impl Handler for Invoice {
    ///     const KIND: &'static str = "invoice";
    ///     const EFFECT: EffectClass = EffectClass::Transactional;
    ///     type Args = i64; // the order id
    ///
    ///     async fn run(&self, cx: &mut JobContext, order_id: i64) -> Result<(), JobError> {
    ///         let mut tx = cx.begin().await?;
    ///         let key = EffectKey::new("invoice-number").part(order_id);
    ///         let n = tx.next_number("invoice", &key).await?;
    ///         if n.new {
    ///             let sql = "INSERT INTO invoice (order_id, number) VALUES ($1, $2)";
    ///             tx.execute(sql, &[order_id.into(), n.number.into()]).await?;
    ///         }
    ///         tx.complete().await?; // number, invoice and completion commit together
    ///         let _ = self.done.send((order_id, n.number, n.new));
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = tempfile::tempdir()?;
    /// let idem = Idem::connect(&format!("sqlite://{}/idem.db", dir.path().display())).await?;
    /// # let mut setup = idem.begin().await?;
    /// # let table = "CREATE TABLE invoice (order_id BIGINT NOT NULL, number BIGINT NOT NULL)";
    /// # setup.execute(table, &[]).await?;
    /// # setup.commit().await?;
    /// for order_id in [7, 8, 7] {
    ///     idem.enqueue(Job::new("invoice", serde_json::json!(order_id))).await?;
    /// }
    /// let (done, mut finished) = mpsc::unbounded_channel();
    /// let one_at_a_time = WorkerConfig::default().only_queue("default", 1);
    /// let mut worker = idem.worker(one_at_a_time)?;
    /// worker.register(Invoice { done })?;
    /// let running = worker.start();
    /// let mut answers = Vec::new();
    /// for _ in 0..3 {
    ///     answers.push(tokio::time::timeout(Duration::from_secs(30), finished.recv()).await?);
    /// }
    /// running.shutdown().await;
    ///
    /// assert_eq!(answers, [Some((7, 1, true)), Some((8, 2, true)), Some((7, 1, false))]);
    /// let sql = "SELECT order_id, number FROM invoice ORDER BY number";
    /// let rows = idem.store().query(sql, &[]).await?;
    /// let invoices: Vec<_> = rows.iter().map(|r| (r[0].as_i64(), r[1].as_i64())).collect();
    /// assert_eq!(invoices, [(Some(7), Some(1)), (Some(8), Some(2))]); // no gap, none twice
    /// # Ok(())
    /// # }
    /// ```
    pub async fn next_number(
        &mut self,
        counter: &str,
        key: &EffectKey,
    ) -> Result<CounterAssigned, IdemError> {
        check_account(counter)?;
        let params = CounterNext {
            counter: counter.to_owned(),
            key: key.render()?,
            lease: self.cx.lease(),
            now: self.cx.idem.clock.now(),
        };
        Ok(self.tx.counter_next(params).await?)
    }

    /// Enqueues this job's successor in the chain: it commits with the effect, names
    /// this job as the one it follows, and has the enqueue key
    /// `chain:{job_id}:{kind}` unless the job sets its own. So a retried or duplicated
    /// execution of this job enqueues one successor, and a stale claim, whose
    /// transaction never opens, none. Two successors of the same kind need keys of their
    /// own ([`Job::enqueue_key`]).
    pub async fn enqueue(&mut self, job: Job) -> Result<Enqueued, IdemError> {
        let job = match job.key() {
            Some(_) => job,
            None => {
                let key = format!("chain:{}:{}", self.cx.job.id, job.kind());
                if key.len() > crate::job::MAX_NAME_LEN {
                    return Err(IdemError::InvalidJob(format!(
                        "the chain key {key:?} is longer than {} characters (the kind is \
                         long); give the successor its own key with Job::enqueue_key",
                        crate::job::MAX_NAME_LEN
                    )));
                }
                job.enqueue_key(key)
            }
        };
        let mut rows = self.enqueue_many(vec![job]).await?;
        Ok(rows.remove(0))
    }

    /// Enqueues follow-up jobs that commit with the effect, each naming this job as the
    /// one it follows. A job whose enqueue key is held inside the window returns the
    /// holding job, marked deduplicated; jobs without a key get none (unlike
    /// [`EffectTx::enqueue`]), so a retried execution would enqueue them again.
    pub async fn enqueue_many(&mut self, jobs: Vec<Job>) -> Result<Vec<Enqueued>, IdemError> {
        let mut params = self.cx.idem.insert_params(jobs)?;
        for job in &mut params.jobs {
            job.follows_job = Some(self.cx.job.id);
        }
        let rows = self.tx.job_insert(params).await?;
        self.queues.extend(rows.iter().map(|r| r.queue.clone()));
        Ok(rows)
    }

    /// Creates a batch in this transaction: its children and its successor commit with
    /// the effect (a handler fanning out). Complete the job in the same transaction
    /// ([`EffectTx::complete`]): then no retry follows a committed fan-out. Children with
    /// enqueue keys built from this job's request make a repeated creation fail
    /// (`Conflict`) instead of fanning out twice.
    pub async fn batch(
        &mut self,
        batch: crate::Batch,
    ) -> Result<idem_store::BatchAdded, IdemError> {
        let params = batch.into_create(&self.cx.idem)?;
        let added = self.tx.batch_create(params).await?;
        self.queues
            .extend(crate::batch::queues_of(&added).map(str::to_owned));
        Ok(added)
    }

    /// Sets what the job completes with ([`JobContext::set_result`]).
    pub fn set_result(&mut self, result: serde_json::Value) -> Result<(), IdemError> {
        self.cx.set_result(result)
    }

    /// The store's transaction, to downcast to the driver's own type
    /// (`idem_sqlite::SqliteTx`, `idem_postgres::PgTx`).
    pub fn store_tx(&mut self) -> &mut dyn StoreTx {
        self.tx.as_mut()
    }

    /// Completes the job in this transaction and commits: the effects and the
    /// completion become visible together, or (on a lost claim) neither does.
    pub async fn complete(mut self) -> Result<(), IdemError> {
        let now = self.cx.idem.clock.now();
        let lease = self.cx.lease();
        let result = self.cx.result.clone();
        // A successor of the job's batch that this enqueues is woken by the worker
        // (`pipeline::finish`), as for a completion the worker makes.
        self.tx
            .job_complete(JobComplete { lease, result, now })
            .await?;
        let signal = self.cx.lease_lost.clone();
        signal.completing.store(true, Ordering::Release);
        let cx = self.finish().await.inspect_err(|_| {
            signal.completing.store(false, Ordering::Release);
        })?;
        cx.completed = true;
        Ok(())
    }

    /// Commits the effects without completing the job (the handler goes on).
    pub async fn commit(self) -> Result<(), IdemError> {
        self.finish().await.map(|_| ())
    }

    /// Commits, then wakes workers for the jobs enqueued in this transaction.
    async fn finish(self) -> Result<&'a mut JobContext, IdemError> {
        self.tx.commit().await?;
        let cx = self.cx;
        cx.idem.jobs_waiting(self.queues.iter().map(String::as_str));
        Ok(cx)
    }
}

/// Checks a ledger account or counter name: 1 to 255 characters, no whitespace or control
/// characters.
fn check_account(account: &str) -> Result<(), IdemError> {
    let bad = account.is_empty()
        || account.len() > 255
        || account.chars().any(|c| c.is_whitespace() || c.is_control());
    if bad {
        return Err(IdemError::InvalidKey(format!(
            "ledger account or counter name {account:?} is not valid: use 1 to 255 \
             characters without whitespace or control characters (e.g. \"customer:42:wallet\")"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "chaos-break-fence")]
    #[test]
    fn a_broken_build_keeps_a_lost_lease_from_the_handler() {
        let signal = LeaseSignal::default();
        assert!(!signal.raise(), "the first loss is news to the heartbeat");
        assert!(signal.raise(), "and it logs it once");
        assert!(!signal.is_raised(), "the handler never hears of it");
    }

    #[test]
    fn a_claim_found_gone_while_its_completion_commits_is_not_news() {
        let signal = LeaseSignal::default();
        signal.completing.store(true, Ordering::Release);
        assert!(signal.raise(), "nothing for the heartbeat to log");
        assert!(
            signal.lost.load(Ordering::Acquire),
            "the handler still hears of it"
        );
        let other = LeaseSignal::default();
        assert!(!other.raise(), "a claim lost before its completion is news");
    }

    #[test]
    fn a_result_with_a_nul_character_or_too_large_is_refused() {
        assert!(check_result(&serde_json::json!({"n": 1, "s": "text"})).is_ok());
        for bad in [
            serde_json::json!({"note": "a\u{0}b"}),
            serde_json::json!([{"deep": ["\u{0}"]}]),
            serde_json::json!({"key\u{0}": 1}),
            serde_json::json!("x".repeat(MAX_RESULT_BYTES)),
        ] {
            let err = check_result(&bad).expect_err("refused");
            assert!(matches!(err, IdemError::InvalidJob(_)), "{err}");
        }
    }
}
