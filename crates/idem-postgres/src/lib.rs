//! The PostgreSQL store of idem, for production (`postgres://…`), with workers on any
//! number of hosts.
//!
//! Three connection pools: the main one; a small one for claims, whose sessions carry
//! [`CLAIM_PLANNER`] and [`GENERIC_PLANS`]; and a small one for the engine's other
//! one-statement operations (insert, heartbeat, the first statement of a completion or
//! failure), whose sessions carry [`GENERIC_PLANS`]. Every operation runs in a READ
//! COMMITTED transaction; those of one statement run straight on a pool, each statement
//! its own transaction. Concurrent
//! claims and rescues lock their candidates with `FOR UPDATE SKIP LOCKED`, and an effect
//! transaction holds a key-share lock on its job from the fence check (`job/lock.sql`) to
//! commit, so no rescue or reclaim can interleave with it. Time is the database clock
//! (`now()`) unless a caller injects it.
//!
//! [`PgStore::connect`] checks the settings once: a `postgres://` or `postgresql://` URL,
//! and an optional schema that must be a plain identifier. With a schema, idem creates it
//! at connect and every pooled connection uses it as its `search_path`, so one database
//! can hold several independent idem installations (and each test its own). What must
//! stay true: no error message carries the URL's password.
//!
//! SQL lives in `queries/<area>/<op>.sql`, one statement per file, at the same paths as in
//! `idem-sqlite`; migrations in `migrations/`, numbered as there.
#![warn(missing_docs)]

// The chaos-break features reach idem-store, whose `compile_error!` refuses them in a
// release build.
#[cfg(any(feature = "chaos-break-fence", feature = "chaos-break-effect-key"))]
mod chaos;
mod connect;
mod error;
mod migrate;
mod notify;
mod operator;
mod ops;
mod primary;
mod row;
mod tx;
mod value;

use async_trait::async_trait;
use idem_store::fast_path;
use idem_store::{
    AttemptRow, Backend, JobCancel, JobClaim, JobComplete, JobCompleteMany, JobDiscard, JobFail,
    JobHeartbeat, JobInsert, JobList, JobRetry, JobRow, LeaseRenewal, Purge, PurgeTarget,
    QueueCount, SqlValue, Store, StoreResult, StoreTx, Timestamp, Wakeups,
};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

pub use connect::{
    BEGIN, CLAIM_CONNECTIONS, CLAIM_PLANNER, CONNECT_TIMEOUT, DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_OPERATOR_LOCK_TIMEOUT, ENGINE_CONNECTIONS, GENERIC_PLANS,
    MAX_SCHEMA_LEN, PgOptions, SESSION, redact, url_with_search_path,
};
pub use error::interpret_error;
pub use tx::PgTx;

/// An idem store in a PostgreSQL database (optionally one schema of it).
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    /// Connections with [`CLAIM_PLANNER`] and [`GENERIC_PLANS`], for claims only.
    claims: PgPool,
    /// Connections with [`GENERIC_PLANS`], for the engine's other one-statement
    /// operations only (never a caller's query).
    engine: PgPool,
    /// [`PgOptions::operator_lock_timeout`].
    operator_lock_timeout: std::time::Duration,
    /// What opens each transaction ([`connect::begin_sql`]).
    begin: std::sync::Arc<str>,
    /// [`PgOptions::max_connections`].
    max_connections: u32,
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db` or
    /// `postgresql://…`), creating `options.schema` if set. Fails promptly (within
    /// [`CONNECT_TIMEOUT`]) with [`idem_store::StoreError::Unavailable`] when the server
    /// cannot be reached, and with [`idem_store::StoreError::NotFound`] when the database
    /// does not exist. Does not migrate; call [`Store::migrate`].
    ///
    /// ```no_run
    /// # async fn demo() -> idem_store::StoreResult<()> {
    /// use idem_postgres::{PgOptions, PgStore};
    /// use idem_store::Store;
    ///
    /// let options = PgOptions { schema: Some("idem".into()), ..PgOptions::default() };
    /// let store = PgStore::connect("postgres://postgres@localhost/app", options).await?;
    /// store.migrate().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: &str, options: PgOptions) -> StoreResult<Self> {
        PgStore::open(url, options, true).await
    }

    /// [`PgStore::connect`] without creating anything: `options.schema`, if set, must
    /// exist ([`idem_store::StoreError::NotFound`] otherwise), and nothing is written on
    /// the way, so a read-only session or role can open the store. Does not migrate; see
    /// [`Store::schema_status`].
    pub async fn open_existing(url: &str, options: PgOptions) -> StoreResult<Self> {
        PgStore::open(url, options, false).await
    }

    /// Checks the settings, probes the server (creating the schema when `create`), and
    /// sets up the pools.
    async fn open(url: &str, options: PgOptions, create: bool) -> StoreResult<Self> {
        #[cfg(any(feature = "chaos-break-fence", feature = "chaos-break-effect-key"))]
        chaos::check();
        options.validate()?;
        let connect = connect::connect_options(url)?;
        connect::probe(url, &connect, options.schema.as_deref(), create).await?;
        let connect = match &options.schema {
            Some(schema) => connect.options([("search_path", schema)]),
            None => connect,
        }
        .options(connect::SESSION);
        let pool_of = |size: u32, connect: PgConnectOptions| {
            PgPoolOptions::new()
                .max_connections(size)
                .test_before_acquire(false)
                .acquire_timeout(CONNECT_TIMEOUT)
                .after_connect(primary::refuse_standby)
                .connect_lazy_with(connect)
        };
        let claims = pool_of(
            options.max_connections.min(CLAIM_CONNECTIONS),
            connect
                .clone()
                .options(CLAIM_PLANNER)
                .options(GENERIC_PLANS),
        );
        let engine = pool_of(
            options.max_connections.min(ENGINE_CONNECTIONS),
            connect.clone().options(GENERIC_PLANS),
        );
        let pool = pool_of(options.max_connections, connect);
        Ok(PgStore {
            pool,
            claims,
            engine,
            operator_lock_timeout: options.operator_lock_timeout,
            begin: connect::begin_sql(options.idle_in_transaction_timeout).into(),
            max_connections: options.max_connections,
        })
    }

    /// The connection pool, for callers that need sqlx directly. Its connections use the
    /// store's schema.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    async fn migrate(&self) -> StoreResult<usize> {
        migrate::run(&self.pool, &self.begin).await
    }

    async fn schema_status(&self) -> StoreResult<idem_store::migration::SchemaStatus> {
        migrate::status(&self.pool).await
    }

    async fn begin(&self) -> StoreResult<Box<dyn StoreTx>> {
        Ok(Box::new(PgTx::begin(&self.pool, &self.begin).await?))
    }

    async fn now(&self) -> StoreResult<Timestamp> {
        ops::clock::now(&self.pool).await
    }

    async fn job_get(&self, id: i64) -> StoreResult<Option<JobRow>> {
        ops::job::get(&self.pool, id).await
    }

    async fn job_awaiting(&self, key: String) -> StoreResult<Option<JobRow>> {
        ops::job::awaiting(&self.pool, key).await
    }

    async fn job_list(&self, p: JobList) -> StoreResult<Vec<JobRow>> {
        ops::job::list(&self.pool, p).await
    }

    async fn job_attempts(&self, job_id: i64) -> StoreResult<Vec<AttemptRow>> {
        ops::job_attempt::list(&self.pool, job_id).await
    }

    async fn job_first_attempts(&self, ids: Vec<i64>) -> StoreResult<Vec<(i64, Timestamp)>> {
        ops::job_attempt::first_started(&self.pool, &ids).await
    }

    async fn queue_waiting(&self) -> StoreResult<Vec<idem_store::QueueWaiting>> {
        ops::queue::waiting(&self.pool).await
    }

    async fn queue_paused(&self) -> StoreResult<Vec<idem_store::PausedQueue>> {
        ops::queue::paused(&self.pool).await
    }

    async fn queue_counts(&self) -> StoreResult<Vec<QueueCount>> {
        ops::queue::counts(&self.pool).await
    }

    async fn queue_finished(
        &self,
        params: idem_store::QueueFinishedList,
    ) -> StoreResult<Vec<idem_store::QueueFinished>> {
        ops::queue::finished(&self.pool, params).await
    }

    async fn effect_list(
        &self,
        params: idem_store::EffectList,
    ) -> StoreResult<Vec<idem_store::EffectRecord>> {
        ops::effect::list(&self.pool, params).await
    }

    async fn intent_get(&self, key: String) -> StoreResult<Option<idem_store::IntentRow>> {
        ops::intent::get(&self.pool, key).await
    }

    async fn intent_counts(&self) -> StoreResult<Vec<idem_store::IntentCount>> {
        ops::intent::counts(&self.pool).await
    }

    async fn batch_get(&self, batch_id: i64) -> StoreResult<Option<idem_store::BatchRow>> {
        ops::batch::get(&self.pool, batch_id).await
    }

    async fn batch_list(&self, p: idem_store::BatchList) -> StoreResult<Vec<idem_store::BatchRow>> {
        ops::batch::list(&self.pool, p).await
    }

    async fn batch_children(&self, p: idem_store::BatchChildren) -> StoreResult<Vec<JobRow>> {
        ops::batch::children(&self.pool, p).await
    }

    async fn batch_states(&self, batch_id: i64) -> StoreResult<Vec<(idem_store::JobState, i64)>> {
        ops::batch::states(&self.pool, batch_id).await
    }

    async fn intent_list(
        &self,
        p: idem_store::IntentList,
    ) -> StoreResult<Vec<idem_store::IntentRow>> {
        ops::intent::list(&self.pool, p).await
    }

    async fn ledger_verify(&self) -> StoreResult<Vec<idem_store::LedgerMismatch>> {
        ops::ledger::verify(&self.pool).await
    }

    async fn query(&self, sql: &str, args: &[SqlValue]) -> StoreResult<Vec<Vec<SqlValue>>> {
        value::query(&self.pool, sql, args).await
    }

    async fn close(&self) {
        self.claims.close().await;
        self.engine.close().await;
        self.pool.close().await;
    }

    fn has_channel(&self) -> bool {
        true
    }

    fn connections(&self) -> Option<u32> {
        Some(self.max_connections)
    }

    async fn announce(&self, queues: &[String]) -> StoreResult<()> {
        notify::announce(&self.pool, queues).await
    }

    async fn subscribe(&self) -> StoreResult<Option<Box<dyn Wakeups>>> {
        notify::subscribe(&self.pool).await.map(Some)
    }

    // The one-statement operations run straight on a pool: the statement is its own
    // transaction, one round trip instead of three. The engine's own (insert, heartbeat,
    // the first statement of a completion or failure) on the engine's pool, claims on
    // theirs.

    async fn job_insert_rows(&self, p: JobInsert) -> StoreResult<Vec<JobRow>> {
        ops::job::insert(&self.engine, p).await
    }

    async fn job_retry(&self, p: JobRetry) -> StoreResult<Vec<JobRow>> {
        operator::retry(self, p).await
    }

    async fn job_discard(&self, p: JobDiscard) -> StoreResult<Vec<i64>> {
        operator::discard(self, p).await
    }

    async fn job_cancel(&self, p: JobCancel) -> StoreResult<JobRow> {
        operator::cancel(self, p).await
    }

    async fn purge(&self, p: Purge) -> StoreResult<u64> {
        if p.target == PurgeTarget::Batches {
            // Three statements (pick, lock the shards, delete): a transaction.
            let mut tx = self.begin().await?;
            let n = tx.purge(p).await?;
            tx.commit().await?;
            return Ok(n);
        }
        ops::purge::delete(&self.pool, p).await
    }

    async fn purge_count(&self, target: PurgeTarget, before: Timestamp) -> StoreResult<u64> {
        ops::purge::count(&self.pool, target, before).await
    }

    async fn job_claim(&self, p: JobClaim) -> StoreResult<Vec<JobRow>> {
        ops::job::claim(&self.claims, p).await
    }

    async fn job_heartbeat(&self, p: JobHeartbeat) -> StoreResult<Vec<LeaseRenewal>> {
        ops::job::heartbeat(&self.engine, p).await
    }

    // Completions and failures of jobs outside batches are one statement each; what that
    // statement leaves alone (children of batches, and stale claims, which are refused
    // again) goes through a transaction that counts the batch (`StoreTx`'s methods).

    async fn job_complete_many(&self, p: JobCompleteMany) -> StoreResult<Vec<i64>> {
        let done = ops::job::complete_many(&self.engine, p.clone(), false).await?;
        fast_path::complete_many_rest(self, p, done).await
    }

    async fn job_complete(&self, p: JobComplete) -> StoreResult<JobRow> {
        let first = ops::job::complete(&self.engine, p.clone(), false).await;
        fast_path::complete_rest(self, p, first).await
    }

    async fn job_fail(&self, p: JobFail) -> StoreResult<JobRow> {
        let first = ops::job::fail(&self.engine, p.clone(), false).await;
        fast_path::fail_rest(self, p, first).await
    }

    /// One statement on a pooled connection, without `BEGIN`/`COMMIT` (the read-back
    /// after a refused write is a second one, retried if the row vanished in between).
    async fn http_key_reserve(
        &self,
        p: idem_store::HttpKeyReserve,
    ) -> StoreResult<idem_store::HttpKeyReserved> {
        let mut conn = self.pool.acquire().await.map_err(error::interpret_error)?;
        ops::http_key::reserve(&mut conn, p).await
    }

    async fn http_key_complete(&self, p: idem_store::HttpKeyComplete) -> StoreResult<bool> {
        ops::http_key::complete(&self.pool, p).await
    }

    async fn http_key_release(&self, p: idem_store::HttpKeyRelease) -> StoreResult<bool> {
        ops::http_key::release(&self.pool, p).await
    }
}

#[cfg(test)]
mod tests;
