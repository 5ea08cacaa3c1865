//! [`JobContext`]: what a running handler holds, and [`EffectTx`], the fenced transaction
//! in which a `Transactional` handler's effects commit together with the job's completion.
//!
//! Invariant: an [`EffectTx`] exists only after the store confirmed, inside that same
//! transaction, that this claim's fence is current, and it keeps the job's row locked
//! until commit; so either the effects and the completion commit together under a
//! current claim, or nothing commits.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

use idem_store::{
    CounterAssigned, CounterNext, EffectClaim, EffectClaimed, JobComplete, JobInsert, JobLock,
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
    notify: Notify,
}

impl LeaseSignal {
    /// Raises the signal; returns whether it was already raised.
    pub(crate) fn raise(&self) -> bool {
        let was = self.lost.swap(true, Ordering::AcqRel);
        self.notify.notify_waiters();
        was
    }

    fn is_raised(&self) -> bool {
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
    job: JobRow,
    idem: Idem,
    lease_lost: Arc<LeaseSignal>,
    pub(crate) completed: bool,
}

impl JobContext {
    pub(crate) fn new(job: JobRow, idem: Idem, lease_lost: Arc<LeaseSignal>) -> Self {
        JobContext {
            job,
            idem,
            lease_lost,
            completed: false,
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
    /// [`IdemError::is_lease_lost`] is true, and nothing can be written.
    pub async fn begin(&mut self) -> Result<EffectTx<'_>, IdemError> {
        let mut tx = self.idem.store.begin().await?;
        tx.job_lock(JobLock {
            lease: self.lease(),
        })
        .await?;
        Ok(EffectTx {
            tx,
            cx: self,
            queues: BTreeSet::new(),
        })
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
        Ok(self.tx.effect_claim(params).await?)
    }

    /// On a retry: warns and counts when an earlier attempt of this job committed a
    /// different key of the same kind (the key changes between attempts).
    async fn check_stable(&mut self, params: &EffectClaim) -> Result<(), IdemError> {
        let others = self.tx.effect_others(params.clone()).await?;
        if !others.is_empty() {
            self.cx.idem.metrics.unstable_effect_key();
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
        Ok(self.tx.ledger_post(params).await?)
    }

    /// The number of `counter` that belongs to the effect `key`: the counter's next one the
    /// first time, committed with the effect, and the same number on every later call for
    /// the same key (a retry of an effect already done). An attempt that rolls back gives
    /// its number back, so retries leave no gaps, unlike a database sequence, whose
    /// `nextval` is never rolled back.
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

    /// Enqueues follow-up jobs that commit with the effect.
    pub async fn enqueue_many(&mut self, jobs: Vec<Job>) -> Result<Vec<JobRow>, IdemError> {
        let jobs = jobs
            .into_iter()
            .map(Job::into_new)
            .collect::<Result<Vec<_>, _>>()?;
        let now = self.cx.idem.clock.now();
        let rows = self.tx.job_insert(JobInsert { jobs, now }).await?;
        self.queues.extend(rows.iter().map(|r| r.queue.clone()));
        Ok(rows)
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
        self.tx.job_complete(JobComplete { lease, now }).await?;
        let cx = self.finish().await?;
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
