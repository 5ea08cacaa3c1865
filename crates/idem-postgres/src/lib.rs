//! The PostgreSQL store of idem, for production (`postgres://…`), with workers on any
//! number of hosts.
//!
//! Two connection pools: the main one, and a small one for claims whose sessions carry
//! [`CLAIM_PLANNER`]. Every operation runs in a READ COMMITTED transaction; the
//! one-statement operations (`single.rs`, `maintenance.rs`) run straight on a pool, each
//! statement its own transaction. Concurrent claims and rescues lock their candidates with
//! `FOR UPDATE SKIP LOCKED`, and an effect transaction holds a key-share lock on its job
//! from the fence check (`job/lock.sql`) to commit, so no rescue or reclaim can
//! interleave with it. Time is the database clock (`now()`)
//! unless a caller injects it.
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

mod error;
mod maintenance;
mod migrate;
mod notify;
mod row;
mod single;
mod tx;
mod value;

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use idem_store::{
    AttemptRow, Backend, JobClaim, JobComplete, JobCompleteMany, JobDiscard, JobFail, JobHeartbeat,
    JobInsert, JobList, JobRescue, JobRetry, JobRow, LeaseRenewal, Purge, PurgeTarget, QueueCount,
    SqlValue, Store, StoreError, StoreResult, StoreTx, Timestamp, Wakeups,
};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection};

pub use error::interpret_error;
pub use tx::PgTx;

/// Default size of the connection pool.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;
/// How long connecting, or waiting for a pooled connection, may take before the store
/// reports the database unavailable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections of the pool that runs claims (see [`CLAIM_PLANNER`]).
pub const CLAIM_CONNECTIONS: u32 = 4;
/// Planner settings of the connections that run claims. A claim must walk the claim index
/// in claim order and stop after `limit` rows; with statistics that no longer describe
/// the table (it filled faster than autoanalyze, or most of it is finished history), the
/// planner judged the waiting jobs few and chose a bitmap scan that sorted every waiting
/// job of the queue on each claim, so a claim's cost grew with the backlog. `idem bench`
/// drain of 100,000 jobs: 16k–20k jobs/s before, 36k–43k after. These settings make the
/// ordered index scan the only plan without a penalty; they apply to idem's claim
/// statements only, never to the caller's queries on the main pool.
pub const CLAIM_PLANNER: [(&str, &str); 3] = [
    ("enable_bitmapscan", "off"),
    ("enable_seqscan", "off"),
    ("enable_sort", "off"),
];
/// The longest schema name PostgreSQL keeps (NAMEDATALEN - 1).
pub const MAX_SCHEMA_LEN: usize = 63;

/// `url` with `options=-c search_path=<schema>` added to its query string: a URL another
/// process can use to reach the same idem schema (libpq's form, which sqlx honours).
/// `schema` must already be a plain identifier (see [`PgOptions::validate`]).
pub fn url_with_search_path(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20search_path%3D{schema}")
}

/// Settings of a PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// The schema holding idem's tables: created at connect if missing and set as every
    /// connection's `search_path`. `None` = the server's `search_path` (usually `public`),
    /// or the one the URL sets with `options=-c search_path=…`. A plain lowercase
    /// identifier: `[a-z_][a-z0-9_]*`, at most 63 characters.
    pub schema: Option<String>,
    /// Largest number of pooled connections.
    pub max_connections: u32,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            schema: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl PgOptions {
    /// Checks the settings; the error names the bad value and what is expected.
    pub fn validate(&self) -> StoreResult<()> {
        if self.max_connections == 0 {
            return Err(StoreError::Config(
                "max_connections is 0; a PostgreSQL store needs at least 1 connection".into(),
            ));
        }
        match &self.schema {
            Some(s) if !is_plain_identifier(s) => Err(StoreError::Config(format!(
                "schema {s:?} is not a plain identifier; expected lowercase letters, digits and \
                 underscores, not starting with a digit, at most {MAX_SCHEMA_LEN} characters \
                 (e.g. idem or idem_test_1)"
            ))),
            _ => Ok(()),
        }
    }
}

fn is_plain_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    first_ok
        && s.len() <= MAX_SCHEMA_LEN
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// An idem store in a PostgreSQL database (optionally one schema of it).
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    /// Connections with [`CLAIM_PLANNER`], for claims only.
    claims: PgPool,
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db` or
    /// `postgresql://…`), creating `options.schema` if set. Fails promptly (within
    /// [`CONNECT_TIMEOUT`]) with [`StoreError::Unavailable`] when the server cannot be
    /// reached. Does not migrate; call [`Store::migrate`].
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
        options.validate()?;
        let connect = connect_options(url)?;
        probe(url, &connect, options.schema.as_deref()).await?;
        let connect = match &options.schema {
            Some(schema) => connect.options([("search_path", schema)]),
            None => connect,
        };
        let pool_of = |size: u32, connect: PgConnectOptions| {
            PgPoolOptions::new()
                .max_connections(size)
                .test_before_acquire(false)
                .acquire_timeout(CONNECT_TIMEOUT)
                .connect_lazy_with(connect)
        };
        let claims = pool_of(
            options.max_connections.min(CLAIM_CONNECTIONS),
            connect.clone().options(CLAIM_PLANNER),
        );
        let pool = pool_of(options.max_connections, connect);
        Ok(PgStore { pool, claims })
    }

    /// The connection pool, for callers that need sqlx directly. Its connections use the
    /// store's schema.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// Parses `url` after checking it names PostgreSQL.
fn connect_options(url: &str) -> StoreResult<PgConnectOptions> {
    if Backend::of_url(url) != Some(Backend::Postgres) {
        return Err(StoreError::Config(format!(
            "{:?} is not a PostgreSQL URL; expected postgres://user:password@host:port/database \
             (or postgresql://…)",
            redact(url)
        )));
    }
    PgConnectOptions::from_str(url)
        .map_err(|e| StoreError::Config(format!("cannot parse {:?}: {e}", redact(url))))
}

/// Opens one connection (bounded by [`CONNECT_TIMEOUT`]) so an unreachable server or bad
/// credentials fail now with their cause, and creates the schema if one is set.
async fn probe(url: &str, connect: &PgConnectOptions, schema: Option<&str>) -> StoreResult<()> {
    let mut conn = tokio::time::timeout(CONNECT_TIMEOUT, connect.connect())
        .await
        .map_err(|_| {
            StoreError::Unavailable(format!(
                "cannot connect to {}: no answer within {} s",
                redact(url),
                CONNECT_TIMEOUT.as_secs()
            ))
        })?
        .map_err(|e| open_error(url, e))?;
    if let Some(schema) = schema {
        create_schema(&mut conn, schema).await?;
    }
    tracing::debug!(url = %redact(url), ?schema, "connected to PostgreSQL");
    conn.close().await.map_err(|e| open_error(url, e))
}

/// `CREATE SCHEMA IF NOT EXISTS`; a concurrent creator winning the race is not an error.
async fn create_schema(conn: &mut sqlx::PgConnection, schema: &str) -> StoreResult<()> {
    // The name was checked to be a plain identifier, so quoting it is enough.
    let sql = format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"");
    match sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(conn).await {
        Ok(_) => Ok(()),
        Err(e) => match interpret_error(e) {
            StoreError::Duplicate(_) => Ok(()),
            other => Err(other),
        },
    }
}

fn open_error(url: &str, e: sqlx::Error) -> StoreError {
    let url = redact(url);
    match interpret_error(e) {
        StoreError::Database(msg) | StoreError::Unavailable(msg) => {
            StoreError::Unavailable(format!("cannot connect to {url}: {msg}"))
        }
        StoreError::Config(msg) => StoreError::Config(format!("cannot connect to {url}: {msg}")),
        other => other,
    }
}

/// `url` with any password (in the user info or a `password=` parameter) replaced by
/// `***`: the only form of a URL that goes into a message or a log.
pub fn redact(url: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut out = match base.split_once("://") {
        Some((scheme, rest)) => format!("{scheme}://{}", redact_userinfo(rest)),
        None => base.to_owned(),
    };
    if !query.is_empty() {
        let params: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_owned(),
            })
            .collect();
        out = format!("{out}?{}", params.join("&"));
    }
    out
}

fn redact_userinfo(rest: &str) -> String {
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}{path}"),
            None => rest.to_owned(),
        },
        None => rest.to_owned(),
    }
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    async fn migrate(&self) -> StoreResult<usize> {
        migrate::run(&self.pool).await
    }

    async fn begin(&self) -> StoreResult<Box<dyn StoreTx>> {
        Ok(Box::new(PgTx::begin(&self.pool).await?))
    }

    async fn now(&self) -> StoreResult<Timestamp> {
        sqlx::query_scalar(include_str!("../queries/clock/now.sql"))
            .fetch_one(&self.pool)
            .await
            .map_err(interpret_error)
    }

    async fn job_get(&self, id: i64) -> StoreResult<Option<JobRow>> {
        single::job_get(&self.pool, id).await
    }

    async fn job_list(&self, p: JobList) -> StoreResult<Vec<JobRow>> {
        let rows = sqlx::query(include_str!("../queries/job/list.sql"))
            .bind(p.state.map(|s| s.as_str()))
            .bind(p.queue)
            .bind(p.kind)
            .bind(p.before_id)
            .bind(i64::from(p.limit))
            .fetch_all(&self.pool)
            .await
            .map_err(interpret_error)?;
        rows.iter().map(row::job).collect()
    }

    async fn job_attempts(&self, job_id: i64) -> StoreResult<Vec<AttemptRow>> {
        let rows = sqlx::query(include_str!("../queries/job_attempt/list.sql"))
            .bind(job_id)
            .fetch_all(&self.pool)
            .await
            .map_err(interpret_error)?;
        rows.iter().map(row::attempt).collect()
    }

    async fn queue_counts(&self) -> StoreResult<Vec<QueueCount>> {
        let rows = sqlx::query(include_str!("../queries/queue/counts.sql"))
            .fetch_all(&self.pool)
            .await
            .map_err(interpret_error)?;
        rows.iter().map(row::queue_count).collect()
    }

    async fn ledger_verify(&self) -> StoreResult<Vec<idem_store::LedgerMismatch>> {
        let rows = sqlx::query(include_str!("../queries/ledger/verify.sql"))
            .fetch_all(&self.pool)
            .await
            .map_err(interpret_error)?;
        rows.iter().map(row::ledger_mismatch).collect()
    }

    async fn query(&self, sql: &str, args: &[SqlValue]) -> StoreResult<Vec<Vec<SqlValue>>> {
        let rows = value::bind_all(sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())), args)?
            .fetch_all(&self.pool)
            .await
            .map_err(interpret_error)?;
        rows.iter().map(value::decode_row).collect()
    }

    async fn close(&self) {
        self.claims.close().await;
        self.pool.close().await;
    }

    fn has_channel(&self) -> bool {
        true
    }

    async fn announce(&self, queues: &[String]) -> StoreResult<()> {
        notify::announce(&self.pool, queues).await
    }

    async fn subscribe(&self) -> StoreResult<Option<Box<dyn Wakeups>>> {
        notify::subscribe(&self.pool).await.map(Some)
    }

    // The one-statement operations run straight on the pool: the statement is its own
    // transaction, one round trip instead of three.

    async fn job_insert_rows(&self, p: JobInsert) -> StoreResult<Vec<JobRow>> {
        single::job_insert(&self.pool, p).await
    }

    async fn job_retry(&self, p: JobRetry) -> StoreResult<Vec<JobRow>> {
        maintenance::job_retry(&self.pool, p).await
    }

    async fn job_discard(&self, p: JobDiscard) -> StoreResult<Vec<i64>> {
        maintenance::job_discard(&self.pool, p).await
    }

    async fn purge(&self, p: Purge) -> StoreResult<u64> {
        maintenance::purge(&self.pool, p).await
    }

    async fn purge_count(&self, target: PurgeTarget, before: Timestamp) -> StoreResult<u64> {
        maintenance::purge_count(&self.pool, target, before).await
    }

    async fn job_claim(&self, p: JobClaim) -> StoreResult<Vec<JobRow>> {
        single::job_claim(&self.claims, p).await
    }

    async fn job_heartbeat(&self, p: JobHeartbeat) -> StoreResult<Vec<LeaseRenewal>> {
        single::job_heartbeat(&self.pool, p).await
    }

    async fn job_complete_many(&self, p: JobCompleteMany) -> StoreResult<Vec<i64>> {
        single::job_complete_many(&self.pool, p).await
    }

    async fn job_complete(&self, p: JobComplete) -> StoreResult<JobRow> {
        single::job_complete(&self.pool, p).await
    }

    async fn job_fail(&self, p: JobFail) -> StoreResult<JobRow> {
        single::job_fail(&self.pool, p).await
    }

    async fn job_rescue(&self, p: JobRescue) -> StoreResult<Vec<JobRow>> {
        single::job_rescue(&self.pool, p).await
    }
}

#[cfg(test)]
mod tests;
