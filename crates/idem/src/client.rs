//! [`Idem`]: the producer-side client (enqueue, read, operate), and [`Tx`], a caller's
//! own transaction in which jobs enqueue together with the caller's rows.
//!
//! The database URL picks the store: `sqlite://path` or `postgres://…`. Two ways in:
//! [`Idem::connect`] creates the database if it can and migrates it (an application
//! starting up); [`Idem::open`] opens a database that exists and whose schema is current,
//! writing nothing on the way (an operator's tool, a read-only session).

use std::collections::BTreeSet;
use std::sync::Arc;

use idem_postgres::{PgOptions, PgStore};
use idem_sqlite::{SqliteOptions, SqliteStore};
use idem_store::{
    AttemptRow, Backend, Enqueued, JobCancel, JobInsert, JobList, JobRescue, JobRow,
    LedgerMismatch, QueueCount, SqlValue, Store, StoreTx, Timestamp,
};

use crate::clock::{Clock, DatabaseClock};
use crate::config::{Horizon, Retention, human};
use crate::error::IdemError;
use crate::job::Job;
use crate::local::LocalQueues;
use crate::telemetry::{Metrics, MetricsSnapshot};
use crate::wake::Waker;
use crate::worker::{POOL_SETTING, Worker, WorkerConfig};

/// Most jobs a rescue call moves at once.
pub(crate) const RESCUE_BATCH: u32 = 1000;

/// The settings of the store a URL names: [`PgOptions`] for `postgres://` URLs (pool
/// size, schema, operator lock timeout), [`SqliteOptions`] for `sqlite://` ones
/// (durability, busy timeout, readers). The URL picks which applies.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// Used when the URL names PostgreSQL.
    pub postgres: PgOptions,
    /// Used when the URL names SQLite.
    pub sqlite: SqliteOptions,
}

/// Opens the store named by `url` (not migrated), with default settings, creating the
/// SQLite file if it is missing.
pub async fn connect_store(url: &str) -> Result<Arc<dyn Store>, IdemError> {
    connect_store_with(url, ConnectOptions::default()).await
}

/// Opens the store named by `url` (not migrated), with `options`, creating the SQLite
/// file (or the configured PostgreSQL schema) if it is missing.
pub async fn connect_store_with(
    url: &str,
    options: ConnectOptions,
) -> Result<Arc<dyn Store>, IdemError> {
    store_of(url, options, true).await
}

/// Opens the existing store named by `url`, with default settings, writing nothing: a
/// missing SQLite file or PostgreSQL database is
/// [`StoreError::NotFound`](idem_store::StoreError::NotFound). Neither creates nor
/// migrates; [`Store::schema_status`] says where its schema stands.
pub async fn open_store(url: &str) -> Result<Arc<dyn Store>, IdemError> {
    open_store_with(url, ConnectOptions::default()).await
}

/// [`open_store`] with `options` (a configured PostgreSQL schema must exist).
pub async fn open_store_with(
    url: &str,
    options: ConnectOptions,
) -> Result<Arc<dyn Store>, IdemError> {
    store_of(url, options, false).await
}

/// The store `url` names, opened with its `connect` (`create`) or its `open_existing`.
async fn store_of(
    url: &str,
    options: ConnectOptions,
    create: bool,
) -> Result<Arc<dyn Store>, IdemError> {
    let url = url.trim();
    let ConnectOptions { postgres, sqlite } = options;
    let store: Arc<dyn Store> = match (Backend::of_url(url), create) {
        (Some(Backend::Sqlite), true) => Arc::new(SqliteStore::connect(url, sqlite).await?),
        (Some(Backend::Sqlite), false) => Arc::new(SqliteStore::open_existing(url, sqlite).await?),
        (Some(Backend::Postgres), true) => Arc::new(PgStore::connect(url, postgres).await?),
        (Some(Backend::Postgres), false) => Arc::new(PgStore::open_existing(url, postgres).await?),
        (None, _) => return Err(unsupported_url(url)),
    };
    Ok(store)
}

fn unsupported_url(url: &str) -> IdemError {
    IdemError::Config(format!(
        "unsupported database URL {:?}: use sqlite://path/to/file.db or \
             postgres://user@host:port/database",
        idem_postgres::redact(url)
    ))
}

/// The idem client: enqueue jobs, read them, operate on them, build workers.
#[derive(Clone)]
pub struct Idem {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) waker: Waker,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) retention: Retention,
    pub(crate) horizon: Horizon,
    /// What the pool check of this client's workers names as the way to size the pool.
    pub(crate) pool_setting: &'static str,
    pub(crate) local: Arc<LocalQueues>,
}

impl std::fmt::Debug for Idem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Idem")
            .field("store", &self.store.backend())
            .field("clock", &self.clock)
            .finish()
    }
}

impl Idem {
    /// Connects to `url` and applies pending migrations.
    pub async fn connect(url: &str) -> Result<Idem, IdemError> {
        Idem::connect_with(url, ConnectOptions::default()).await
    }

    /// [`Idem::connect`] with the store's settings, such as the PostgreSQL pool size:
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), idem::IdemError> {
    /// use idem::{ConnectOptions, Idem, PgOptions};
    ///
    /// let postgres = PgOptions { max_connections: 40, ..PgOptions::default() };
    /// let options = ConnectOptions { postgres, ..ConnectOptions::default() };
    /// let idem = Idem::connect_with("postgres://app@db/app", options).await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_with(url: &str, options: ConnectOptions) -> Result<Idem, IdemError> {
        let store = connect_store_with(url, options).await?;
        store.migrate().await?;
        Ok(Idem::from_store(store))
    }

    /// Opens the existing database at `url` whose schema is this build's, writing
    /// nothing on the way: no file or schema is created and nothing is migrated, so it
    /// works in a read-only session. A missing database is
    /// [`StoreError::NotFound`](idem_store::StoreError::NotFound); a schema with pending
    /// migrations, or one a newer idem migrated, is
    /// [`StoreError::SchemaNotCurrent`](idem_store::StoreError::SchemaNotCurrent), naming
    /// the versions. What the client does afterwards (enqueue, cancel, …) writes as asked.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), idem::IdemError> {
    /// let idem = idem::Idem::open("sqlite://idem.db").await?;
    /// for count in idem.queue_counts().await? {
    ///     println!("{} {} {}", count.queue, count.state, count.count);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn open(url: &str) -> Result<Idem, IdemError> {
        Idem::open_with(url, ConnectOptions::default()).await
    }

    /// [`Idem::open`] with the store's settings (see [`Idem::connect_with`]).
    pub async fn open_with(url: &str, options: ConnectOptions) -> Result<Idem, IdemError> {
        let store = open_store_with(url, options).await?;
        store.schema_status().await?.require_current()?;
        Ok(Idem::from_store(store))
    }

    /// A client over an already migrated store, on the database clock.
    pub fn from_store(store: Arc<dyn Store>) -> Idem {
        #[cfg(any(feature = "chaos-break-fence", feature = "chaos-break-effect-key"))]
        idem_store::chaos::announce();
        Idem {
            store,
            clock: Arc::new(DatabaseClock),
            waker: Waker::default(),
            metrics: Arc::new(Metrics::default()),
            retention: Retention::default(),
            horizon: WorkerConfig::default().horizon(),
            pool_setting: POOL_SETTING,
            local: Arc::new(LocalQueues::default()),
        }
    }

    /// The same client with other retention windows: how long enqueue keys and effect
    /// keys deduplicate, and how long finished jobs are kept. Refused unless valid
    /// ([`Retention::validate`]); a worker also refuses to start when the windows do not
    /// cover its retry horizon.
    pub fn with_retention(mut self, retention: Retention) -> Result<Idem, IdemError> {
        retention.validate()?;
        self.retention = retention;
        Ok(self)
    }

    /// The retention windows in force.
    pub fn retention(&self) -> &Retention {
        &self.retention
    }

    /// The same client judging operator retries ([`Idem::retry_jobs`]) with `horizon`:
    /// the longest a retried job may keep running, which its first attempt's effect keys
    /// must outlive. Give it the horizon of the workers that run the jobs
    /// ([`WorkerConfig::horizon`]); the default is that of [`WorkerConfig::default`].
    pub fn with_horizon(mut self, horizon: Horizon) -> Idem {
        self.horizon = horizon;
        self
    }

    /// The same client with its workers' pool check ([`WorkerConfig::check_connections`])
    /// naming `setting` as the way to a larger PostgreSQL pool: for a program that sizes
    /// the pool from settings of its own (the `idem` command line names `[worker]
    /// pool_size` and `--pool-size`). Default: [`POOL_SETTING`].
    pub fn with_pool_setting(mut self, setting: &'static str) -> Idem {
        self.pool_setting = setting;
        self
    }

    /// The retry horizon operator retries are judged with.
    pub fn horizon(&self) -> &Horizon {
        &self.horizon
    }

    /// Now on the client's clock, else the database's.
    pub async fn now(&self) -> Result<Timestamp, IdemError> {
        match self.clock.now() {
            Some(t) => Ok(t),
            None => Ok(self.store.now().await?),
        }
    }

    /// The same client with injected time (tests, simulations).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Idem {
        self.clock = clock;
        self
    }

    /// The clock this client passes to the store (`None` = the database clock).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The store underneath.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Enqueues one job. With an enqueue key already held inside the window, nothing is
    /// written and the holding job is returned, marked deduplicated.
    pub async fn enqueue(&self, job: Job) -> Result<Enqueued, IdemError> {
        let mut rows = self.enqueue_many(vec![job]).await?;
        Ok(rows.remove(0))
    }

    /// Enqueues many jobs in one statement (two when some carry enqueue keys); all or
    /// none are written. Results follow the input order.
    ///
    /// A job due now whose queue a worker of this client serves in this process, idle
    /// with a free slot, is inserted already claimed by that worker and starts as soon as
    /// the insert commits ([`WorkerConfig::local_dispatch`]).
    pub async fn enqueue_many(&self, jobs: Vec<Job>) -> Result<Vec<Enqueued>, IdemError> {
        let mut params = self.insert_params(jobs)?;
        let reserved = self.local.reserve(&mut params.jobs);
        let rows = self.store.job_insert(params).await?;
        let started = self.local.start(&rows, reserved);
        // Nothing new waits for a job that started here or an enqueue that deduplicated.
        let waiting = rows
            .iter()
            .zip(started)
            .filter(|(r, started)| !started && !r.deduplicated);
        self.jobs_waiting(waiting.map(|(r, _)| r.queue.as_str()));
        Ok(rows)
    }

    /// Opens a transaction of the caller's own: write rows with [`Tx::execute`] and
    /// enqueue with [`Idem::enqueue_tx`]; both commit or roll back together.
    pub async fn begin(&self) -> Result<Tx, IdemError> {
        Ok(Tx {
            inner: self.store.begin().await?,
            idem: self.clone(),
            queues: BTreeSet::new(),
        })
    }

    /// Enqueues a job inside the caller's transaction.
    pub async fn enqueue_tx(&self, tx: &mut Tx, job: Job) -> Result<Enqueued, IdemError> {
        let mut rows = self.enqueue_many_tx(tx, vec![job]).await?;
        Ok(rows.remove(0))
    }

    /// Enqueues many jobs inside the caller's transaction, in one statement.
    pub async fn enqueue_many_tx(
        &self,
        tx: &mut Tx,
        jobs: Vec<Job>,
    ) -> Result<Vec<Enqueued>, IdemError> {
        let params = self.insert_params(jobs)?;
        let rows = tx.inner.job_insert(params).await?;
        tx.queues.extend(rows.iter().map(|r| r.queue.clone()));
        Ok(rows)
    }

    /// The store's insert of `jobs`, checked, with this client's enqueue-key window.
    pub(crate) fn insert_params(&self, jobs: Vec<Job>) -> Result<JobInsert, IdemError> {
        let jobs = jobs
            .into_iter()
            .map(Job::into_new)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(JobInsert {
            jobs,
            key_window_ms: millis(self.retention.enqueue_keys),
            now: self.clock.now(),
        })
    }

    /// One job by id.
    pub async fn job(&self, id: i64) -> Result<Option<JobRow>, IdemError> {
        Ok(self.store.job_get(id).await?)
    }

    /// Jobs matching the filters, newest first.
    pub async fn jobs(&self, filter: JobList) -> Result<Vec<JobRow>, IdemError> {
        Ok(self.store.job_list(filter).await?)
    }

    /// The finished attempts of a job, oldest first.
    pub async fn attempts(&self, job_id: i64) -> Result<Vec<AttemptRow>, IdemError> {
        Ok(self.store.job_attempts(job_id).await?)
    }

    /// Job counts per queue and state.
    pub async fn queue_counts(&self) -> Result<Vec<QueueCount>, IdemError> {
        Ok(self.store.queue_counts().await?)
    }

    /// Waiting jobs per queue and kind, with the earliest `run_at` of each: a kind no
    /// running worker has a handler for waits here, never claimed.
    pub async fn queue_waiting(&self) -> Result<Vec<idem_store::QueueWaiting>, IdemError> {
        Ok(self.store.queue_waiting().await?)
    }

    /// Pauses `queue`: no worker claims from it (in any process) until it is resumed;
    /// enqueues into it go on, and jobs already running finish. `false` when it was
    /// paused already. `by` names who paused it, for operators.
    pub async fn pause_queue(&self, queue: &str, by: Option<&str>) -> Result<bool, IdemError> {
        crate::job::check_name("queue", queue)?;
        let params = idem_store::QueuePause {
            queue: queue.to_owned(),
            by: by.map(str::to_owned),
            now: self.clock.now(),
        };
        Ok(self.store.queue_pause(params).await?)
    }

    /// Resumes a paused `queue` and wakes the workers that serve it; `false` when it was
    /// not paused.
    pub async fn resume_queue(&self, queue: &str) -> Result<bool, IdemError> {
        crate::job::check_name("queue", queue)?;
        let resumed = self.store.queue_resume(queue.to_owned()).await?;
        if resumed {
            self.jobs_waiting([queue]);
        }
        Ok(resumed)
    }

    /// Every paused queue, by name.
    pub async fn paused_queues(&self) -> Result<Vec<idem_store::PausedQueue>, IdemError> {
        Ok(self.store.queue_paused().await?)
    }

    /// Cancels an unfinished job; a running job's worker is fenced out.
    pub async fn cancel(&self, job_id: i64) -> Result<JobRow, IdemError> {
        let now = self.clock.now();
        Ok(self.store.job_cancel(JobCancel { job_id, now }).await?)
    }

    /// Moves running jobs whose lease expired back to `retryable` (or `dead` when out of
    /// attempts); workers do this on their own every few seconds.
    pub async fn rescue(&self) -> Result<Vec<JobRow>, IdemError> {
        self.rescue_capped(None, None).await
    }

    /// [`Idem::rescue`] with a worker's cap on attempts (its `max_attempts`), made for
    /// the maintenance leader `leader` when given: in a transaction that first checks
    /// the leadership and holds it to the commit (refused with `LeadershipLost`).
    pub(crate) async fn rescue_capped(
        &self,
        cap: Option<i32>,
        leader: Option<&idem_store::LeaderToken>,
    ) -> Result<Vec<JobRow>, IdemError> {
        let now = self.clock.now();
        let params = JobRescue {
            limit: RESCUE_BATCH,
            retry_in_ms: 0,
            max_attempts: cap,
            now,
        };
        let rows = match leader {
            None => self.store.job_rescue(params).await?,
            Some(token) => {
                let mut tx = self.led_tx(token).await?;
                let rows = tx.job_rescue(params).await?;
                tx.commit().await?;
                rows
            }
        };
        crate::telemetry::metrics::rescued(&rows);
        self.jobs_waiting(rows.iter().map(|r| r.queue.as_str()));
        Ok(rows)
    }

    /// A transaction of the maintenance leader `token`: opened, its leadership checked
    /// and held to the commit (`LeadershipLost` when it is not current).
    pub(crate) async fn led_tx(
        &self,
        token: &idem_store::LeaderToken,
    ) -> Result<Box<dyn StoreTx>, IdemError> {
        let mut tx = self.store.begin().await?;
        tx.leader_check(token.clone(), self.clock.now()).await?;
        Ok(tx)
    }

    /// Wakes local workers and announces to other processes that jobs wait in `queues`.
    pub(crate) fn jobs_waiting<'a>(&self, queues: impl IntoIterator<Item = &'a str>) {
        let mut queues = queues.into_iter().peekable();
        if queues.peek().is_some() {
            let unique: BTreeSet<&str> = queues.collect();
            self.waker.jobs_waiting(&self.store, unique);
        }
    }

    /// Sends the announcements of the jobs enqueued so far to workers in other processes
    /// (where the store has a channel), then closes the store. A producer that exits
    /// right after enqueueing calls it; otherwise other processes' workers may find its
    /// jobs only when they poll.
    pub async fn close(&self) {
        self.waker.flush().await;
        self.store.close().await;
    }

    /// Every ledger account whose running total differs from the sum of its entries.
    pub async fn ledger_verify(&self) -> Result<Vec<LedgerMismatch>, IdemError> {
        Ok(self.store.ledger_verify().await?)
    }

    /// Rebuilds mismatched running totals from their entries in one transaction when
    /// `apply`; otherwise only reports what it would change (a dry run).
    pub async fn ledger_repair(&self, apply: bool) -> Result<Vec<LedgerMismatch>, IdemError> {
        Ok(self.store.ledger_repair(apply).await?)
    }

    /// What this client and its workers noticed so far.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// A worker over this client's store and clock. Refused when the configuration is
    /// invalid, when this client's retention windows do not cover the worker's retry
    /// horizon (the error names both durations), or when the store's pool cannot serve
    /// the worker's own duties and one job ([`WorkerConfig::check_connections`]). The
    /// horizon operator retries are judged with stays this client's
    /// ([`Idem::with_horizon`]); a worker whose horizon is longer is logged as a warning.
    pub fn worker(&self, config: WorkerConfig) -> Result<Worker, IdemError> {
        config.validate()?;
        let horizon = config.horizon();
        self.retention.check_covers(&horizon)?;
        let store = &self.store;
        config.check_connections(
            store.connections(),
            |n| store.connections_for(n),
            self.pool_setting,
        )?;
        if horizon.total > self.horizon.total {
            tracing::warn!(
                worker_horizon = %human(horizon.total),
                client_horizon = %human(self.horizon.total),
                "this worker's retry horizon is longer than the one this client judges \
                 operator retries with; call Idem::with_horizon(config.horizon()) so a retry \
                 is refused when the worker could outlive the effect keys"
            );
        }
        Worker::new(self.clone(), config)
    }
}

/// A caller's own write transaction. Dropping it without [`Tx::commit`] rolls back.
pub struct Tx {
    inner: Box<dyn StoreTx>,
    idem: Idem,
    queues: BTreeSet<String>,
}

impl Tx {
    /// Runs a statement (placeholders `$1`, `$2`, …); returns the rows affected.
    pub async fn execute(&mut self, sql: &str, args: &[SqlValue]) -> Result<u64, IdemError> {
        Ok(self.inner.execute(sql, args).await?)
    }

    /// Runs a query; returns rows of values.
    pub async fn query(
        &mut self,
        sql: &str,
        args: &[SqlValue],
    ) -> Result<Vec<Vec<SqlValue>>, IdemError> {
        Ok(self.inner.query(sql, args).await?)
    }

    /// The store's transaction, to downcast to the driver's own type.
    pub fn store_tx(&mut self) -> &mut dyn StoreTx {
        self.inner.as_mut()
    }

    /// Jobs now wait in `queues`: workers are woken after the commit.
    pub(crate) fn waiting<'a>(&mut self, queues: impl Iterator<Item = &'a str>) {
        self.queues.extend(queues.map(str::to_owned));
    }

    /// Commits; jobs enqueued in this transaction become visible to workers now.
    pub async fn commit(self) -> Result<(), IdemError> {
        self.inner.commit().await?;
        self.idem
            .jobs_waiting(self.queues.iter().map(String::as_str));
        Ok(())
    }

    /// Rolls back everything written in this transaction.
    pub async fn rollback(self) -> Result<(), IdemError> {
        Ok(self.inner.rollback().await?)
    }
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unknown_schemes_are_refused_with_the_expected_forms() {
        let err = connect_store("mysql://u:pw@h/db")
            .await
            .err()
            .expect("refused");
        let msg = err.to_string();
        assert!(
            msg.contains("sqlite://") && msg.contains("postgres://"),
            "{msg}"
        );
        assert!(!msg.contains("pw"), "{msg}");
    }
}
