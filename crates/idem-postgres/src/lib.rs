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
//! Behind a connection pooler in transaction mode (`?pooler=transaction`, [`Pooler`]), the
//! pools keep nothing in the server session: settings are set in each transaction, no
//! statement is prepared by name, one-statement operations run in a transaction too, and
//! LISTEN goes over a direct connection or not at all (`pooler.rs`).
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
mod pooler;
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
    BEGIN, Budget, CLAIM_CONNECTIONS, CLAIM_PLANNER, CONNECT_TIMEOUT,
    DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_OPERATOR_LOCK_TIMEOUT,
    ENGINE_CONNECTIONS, GENERIC_PLANS, MAX_SCHEMA_LEN, PgOptions, SESSION, redact,
    url_with_search_path,
};
pub use error::interpret_error;
use pooler::Pool;
pub use pooler::{LISTEN_URL_PARAM, POOLER_PARAM, Pooler};
pub use tx::PgTx;

/// An idem store in a PostgreSQL database (optionally one schema of it).
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: Pool,
    /// Connections with [`CLAIM_PLANNER`] and [`GENERIC_PLANS`], for claims only.
    claims: Pool,
    /// Connections with [`GENERIC_PLANS`], for the engine's other one-statement
    /// operations only (never a caller's query).
    engine: Pool,
    /// Direct connections to the server for LISTEN behind a pooler
    /// ([`PgOptions::listen_url`]); `None` without a pooler (LISTEN uses `pool`) or
    /// without a direct URL (workers poll).
    listen: Option<PgPool>,
    /// [`PgOptions::operator_lock_timeout`].
    operator_lock_timeout: std::time::Duration,
    /// The main pool's share of [`PgOptions::max_connections`] ([`Budget`]).
    transactions: u32,
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
    /// sets up the pools: directly, with the settings as startup options, or behind a
    /// pooler, with them set in each transaction (`pooler.rs`).
    async fn open(url: &str, options: PgOptions, create: bool) -> StoreResult<Self> {
        #[cfg(any(feature = "chaos-break-fence", feature = "chaos-break-effect-key"))]
        chaos::check();
        options.validate()?;
        let parsed = pooler::split_url(url, options.pooler)?;
        let pooler = parsed.pooler;
        let connect = connect::connect_options(&parsed.url)?;
        let connect = match pooler {
            Pooler::None => connect,
            Pooler::Transaction => connect.statement_cache_capacity(0).extra_float_digits(None),
        };
        connect::probe(url, &connect, options.schema.as_deref(), create).await?;
        let mut settings = parsed.settings;
        settings.extend(
            options
                .schema
                .iter()
                .map(|s| ("search_path".into(), s.clone())),
        );
        let listen_url = options
            .listen_url
            .as_deref()
            .or(parsed.listen_url.as_deref());
        let listen = match (pooler, listen_url) {
            (Pooler::Transaction, Some(direct)) => Some(
                PgPoolOptions::new()
                    .max_connections(options.max_connections)
                    .acquire_timeout(CONNECT_TIMEOUT)
                    .connect_lazy_with(connect::connect_options(direct)?),
            ),
            _ => None,
        };
        let budget = Budget::of(options.max_connections);
        let pool = pool_of(
            budget.transactions,
            &connect,
            pooler,
            &settings,
            &[],
            false,
            options.idle_in_transaction_timeout,
        );
        let own = |size: u32, extra: &[(&str, &str)]| match budget.shared {
            true => pool.clone(),
            false => pool_of(
                size,
                &connect,
                pooler,
                &settings,
                extra,
                true,
                options.idle_in_transaction_timeout,
            ),
        };
        Ok(PgStore {
            claims: own(budget.claims, &CLAIM_PLANNER),
            engine: own(budget.engine, &[]),
            pool,
            listen,
            operator_lock_timeout: options.operator_lock_timeout,
            transactions: budget.transactions,
        })
    }

    /// The connection pool, for callers that need sqlx directly. Its connections use the
    /// store's schema.
    ///
    /// Behind a pooler in transaction mode (`pooler=transaction`), a statement run on it
    /// straight, outside a transaction, has neither the schema nor a server connection of
    /// its own between its two round trips: use [`PgStore::begin`] (or
    /// [`PgTx::inner`]) there instead.
    pub fn pool(&self) -> &PgPool {
        &self.pool.pool
    }
}

/// A pool of `size` connections. Directly, the session carries `settings` and `extra` as
/// startup options, with [`SESSION`], and [`GENERIC_PLANS`] if `generic` (the claims' and
/// the engine's pools; the caller's keeps `auto`). Behind a pooler, `settings` and `extra`
/// are set in each transaction instead, and [`GENERIC_PLANS`] is left out: unnamed
/// statements are planned on every execution whatever the mode.
fn pool_of(
    size: u32,
    connect: &PgConnectOptions,
    pooler: Pooler,
    settings: &[(String, String)],
    extra: &[(&str, &str)],
    generic: bool,
    idle: std::time::Duration,
) -> Pool {
    let mut all = settings.to_vec();
    all.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    let connect = match pooler {
        Pooler::Transaction => connect.clone(),
        Pooler::None => {
            let c = connect.clone().options(all.iter().map(|(k, v)| (k, v)));
            let c = c.options(connect::SESSION);
            match generic {
                true => c.options(GENERIC_PLANS),
                false => c,
            }
        }
    };
    let pool = PgPoolOptions::new()
        .max_connections(size)
        .test_before_acquire(false)
        .acquire_timeout(CONNECT_TIMEOUT)
        .after_connect(primary::refuse_standby)
        .connect_lazy_with(connect);
    Pool::new(pool, pooler, &all, idle)
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    async fn migrate(&self) -> StoreResult<usize> {
        migrate::run(&self.pool).await
    }

    async fn schema_status(&self) -> StoreResult<idem_store::migration::SchemaStatus> {
        migrate::status(&self.pool).await
    }

    async fn begin(&self) -> StoreResult<Box<dyn StoreTx>> {
        Ok(Box::new(PgTx::begin(&self.pool).await?))
    }

    async fn now(&self) -> StoreResult<Timestamp> {
        self.pool.run(|c| Box::pin(ops::clock::now(c))).await
    }

    async fn job_get(&self, id: i64) -> StoreResult<Option<JobRow>> {
        self.pool.run(move |c| Box::pin(ops::job::get(c, id))).await
    }

    async fn job_awaiting(&self, key: String) -> StoreResult<Option<JobRow>> {
        self.pool
            .run(move |c| Box::pin(ops::job::awaiting(c, key)))
            .await
    }

    async fn job_list(&self, p: JobList) -> StoreResult<Vec<JobRow>> {
        self.pool.run(move |c| Box::pin(ops::job::list(c, p))).await
    }

    async fn job_attempts(&self, job_id: i64) -> StoreResult<Vec<AttemptRow>> {
        self.pool
            .run(move |c| Box::pin(ops::job_attempt::list(c, job_id)))
            .await
    }

    async fn job_first_attempts(&self, ids: Vec<i64>) -> StoreResult<Vec<(i64, Timestamp)>> {
        self.pool
            .run(move |c| Box::pin(async move { ops::job_attempt::first_started(c, &ids).await }))
            .await
    }

    async fn queue_waiting(&self) -> StoreResult<Vec<idem_store::QueueWaiting>> {
        self.pool.run(|c| Box::pin(ops::queue::waiting(c))).await
    }

    async fn queue_paused(&self) -> StoreResult<Vec<idem_store::PausedQueue>> {
        self.pool.run(|c| Box::pin(ops::queue::paused(c))).await
    }

    async fn queue_counts(&self) -> StoreResult<Vec<QueueCount>> {
        self.pool.run(|c| Box::pin(ops::queue::counts(c))).await
    }

    async fn queue_finished(
        &self,
        params: idem_store::QueueFinishedList,
    ) -> StoreResult<Vec<idem_store::QueueFinished>> {
        self.pool
            .run(move |c| Box::pin(ops::queue::finished(c, params)))
            .await
    }

    async fn effect_list(
        &self,
        params: idem_store::EffectList,
    ) -> StoreResult<Vec<idem_store::EffectRecord>> {
        self.pool
            .run(move |c| Box::pin(ops::effect::list(c, params)))
            .await
    }

    async fn intent_get(&self, key: String) -> StoreResult<Option<idem_store::IntentRow>> {
        self.pool
            .run(move |c| Box::pin(ops::intent::get(c, key)))
            .await
    }

    async fn intent_counts(&self) -> StoreResult<Vec<idem_store::IntentCount>> {
        self.pool.run(|c| Box::pin(ops::intent::counts(c))).await
    }

    async fn batch_get(&self, batch_id: i64) -> StoreResult<Option<idem_store::BatchRow>> {
        self.pool
            .run(move |c| Box::pin(ops::batch::get(c, batch_id)))
            .await
    }

    async fn batch_list(&self, p: idem_store::BatchList) -> StoreResult<Vec<idem_store::BatchRow>> {
        self.pool
            .run(move |c| Box::pin(ops::batch::list(c, p)))
            .await
    }

    async fn batch_children(&self, p: idem_store::BatchChildren) -> StoreResult<Vec<JobRow>> {
        self.pool
            .run(move |c| Box::pin(ops::batch::children(c, p)))
            .await
    }

    async fn batch_states(&self, batch_id: i64) -> StoreResult<Vec<(idem_store::JobState, i64)>> {
        self.pool
            .run(move |c| Box::pin(ops::batch::states(c, batch_id)))
            .await
    }

    async fn intent_list(
        &self,
        p: idem_store::IntentList,
    ) -> StoreResult<Vec<idem_store::IntentRow>> {
        self.pool
            .run(move |c| Box::pin(ops::intent::list(c, p)))
            .await
    }

    async fn ledger_verify(&self) -> StoreResult<Vec<idem_store::LedgerMismatch>> {
        self.pool.run(|c| Box::pin(ops::ledger::verify(c))).await
    }

    async fn query(&self, sql: &str, args: &[SqlValue]) -> StoreResult<Vec<Vec<SqlValue>>> {
        let (sql, args) = (sql.to_owned(), args.to_vec());
        self.pool
            .run(move |c| Box::pin(async move { value::query(c, &sql, &args).await }))
            .await
    }

    async fn close(&self) {
        self.claims.close().await;
        self.engine.close().await;
        self.pool.close().await;
        if let Some(listen) = &self.listen {
            listen.close().await;
        }
    }

    fn has_channel(&self) -> bool {
        true
    }

    fn connections(&self) -> Option<u32> {
        Some(self.transactions)
    }

    fn connections_for(&self, transactions: u32) -> u32 {
        Budget::total_for(transactions)
    }

    async fn announce(&self, queues: &[String]) -> StoreResult<()> {
        notify::announce(&self.pool, queues).await
    }

    async fn subscribe(&self) -> StoreResult<Option<Box<dyn Wakeups>>> {
        notify::subscribe(&self.pool, self.listen.as_ref()).await
    }

    // The one-statement operations run straight on a pool: the statement is its own
    // transaction, one round trip instead of three. The engine's own (insert, heartbeat,
    // the first statement of a completion or failure) on the engine's pool, claims on
    // theirs.

    async fn job_insert_rows(&self, p: JobInsert) -> StoreResult<Vec<JobRow>> {
        self.engine
            .run(move |c| Box::pin(ops::job::insert(c, p)))
            .await
    }

    async fn job_retry(&self, p: JobRetry) -> StoreResult<Vec<JobRow>> {
        operator::retry(&self.pool, self.operator_lock_timeout, p).await
    }

    async fn job_discard(&self, p: JobDiscard) -> StoreResult<Vec<i64>> {
        operator::discard(&self.pool, self.operator_lock_timeout, p).await
    }

    async fn job_cancel(&self, p: JobCancel) -> StoreResult<JobRow> {
        operator::cancel(&self.pool, self.operator_lock_timeout, p).await
    }

    async fn purge(&self, p: Purge) -> StoreResult<u64> {
        if p.target == PurgeTarget::Batches {
            // Three statements (pick, lock the shards, delete): a transaction.
            let mut tx = self.begin().await?;
            let n = tx.purge(p).await?;
            tx.commit().await?;
            return Ok(n);
        }
        self.pool
            .run(move |c| Box::pin(ops::purge::delete(c, p)))
            .await
    }

    async fn purge_count(&self, target: PurgeTarget, before: Timestamp) -> StoreResult<u64> {
        self.pool
            .run(move |c| Box::pin(ops::purge::count(c, target, before)))
            .await
    }

    async fn job_claim(&self, p: JobClaim) -> StoreResult<Vec<JobRow>> {
        self.claims
            .run(move |c| Box::pin(ops::job::claim(c, p)))
            .await
    }

    async fn job_heartbeat(&self, p: JobHeartbeat) -> StoreResult<Vec<LeaseRenewal>> {
        self.engine
            .run(move |c| Box::pin(ops::job::heartbeat(c, p)))
            .await
    }

    // Completions and failures of jobs outside batches are one statement each; what that
    // statement leaves alone (children of batches, and stale claims, which are refused
    // again) goes through a transaction that counts the batch (`StoreTx`'s methods).

    async fn job_complete_many(&self, p: JobCompleteMany) -> StoreResult<Vec<i64>> {
        let q = p.clone();
        let done = self
            .engine
            .run(move |c| Box::pin(ops::job::complete_many(c, q, false)))
            .await?;
        fast_path::complete_many_rest(self, p, done).await
    }

    async fn job_complete(&self, p: JobComplete) -> StoreResult<JobRow> {
        let q = p.clone();
        let first = self
            .engine
            .run(move |c| Box::pin(ops::job::complete(c, q, false)))
            .await;
        fast_path::complete_rest(self, p, first).await
    }

    async fn job_fail(&self, p: JobFail) -> StoreResult<JobRow> {
        let q = p.clone();
        let first = self
            .engine
            .run(move |c| Box::pin(ops::job::fail(c, q, false)))
            .await;
        fast_path::fail_rest(self, p, first).await
    }

    /// One statement on a pooled connection, without `BEGIN`/`COMMIT` (the read-back
    /// after a refused write is a second one, retried if the row vanished in between).
    async fn http_key_reserve(
        &self,
        p: idem_store::HttpKeyReserve,
    ) -> StoreResult<idem_store::HttpKeyReserved> {
        self.pool
            .run(move |c| Box::pin(ops::http_key::reserve(c, p)))
            .await
    }

    async fn http_key_complete(&self, p: idem_store::HttpKeyComplete) -> StoreResult<bool> {
        self.pool
            .run(move |c| Box::pin(ops::http_key::complete(c, p)))
            .await
    }

    async fn http_key_release(&self, p: idem_store::HttpKeyRelease) -> StoreResult<bool> {
        self.pool
            .run(move |c| Box::pin(ops::http_key::release(c, p)))
            .await
    }
}

#[cfg(test)]
mod tests;
