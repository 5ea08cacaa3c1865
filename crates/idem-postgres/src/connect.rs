//! The store's settings ([`PgOptions`]) and how they and a URL become connections: the
//! URL checked and parsed, one probe connection that reports an unreachable server, bad
//! credentials or a missing database at once and creates the schema (or, opening an
//! existing database, checks that it exists), and the URL forms that may be shown.
//!
//! What must stay true: no error message or log carries the URL's password ([`redact`]).

use std::str::FromStr;
use std::time::Duration;

use idem_store::{Backend, StoreError, StoreResult};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

use crate::error::interpret_error;
use crate::pooler::Pooler;

/// Default [`PgOptions::max_connections`]: what a worker with the default concurrency (10)
/// needs, its jobs and its own duties (7: two completion flushes, rescuer, purger,
/// elector, listener, announcer), once the claim and engine pools have their share
/// ([`Budget`]): 2 + 5 + 18.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 25;
/// How long connecting, or waiting for a pooled connection, may take before the store
/// reports the database unavailable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections of the pool that runs claims (see [`CLAIM_PLANNER`]).
pub const CLAIM_CONNECTIONS: u32 = 4;
/// Most connections of the engine's pool, which runs its other one-statement operations
/// (insert, heartbeat, and the first statement of a completion or failure) with
/// [`GENERIC_PLANS`]: a worker's two completion flushes and heartbeat, and enqueues from
/// its process.
pub const ENGINE_CONNECTIONS: u32 = 8;

/// How a store's [`PgOptions::max_connections`] is shared among its three pools, so that
/// the setting bounds every connection the store opens to the server (a direct LISTEN
/// connection behind a pooler aside): a tenth for claims (1 to [`CLAIM_CONNECTIONS`]), a
/// fifth for the engine (1 to [`ENGINE_CONNECTIONS`]), the rest for transactions. Below
/// 3 connections the three are one pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Connections of the claim pool.
    pub claims: u32,
    /// Connections of the engine's pool.
    pub engine: u32,
    /// Connections of the main pool: transactions, the caller's SQL, listings, LISTEN.
    pub transactions: u32,
    /// Whether claims and the engine use the main pool (fewer than 3 connections).
    pub shared: bool,
}

impl Budget {
    /// The share of `total` connections.
    pub fn of(total: u32) -> Budget {
        if total < 3 {
            return Budget {
                claims: total,
                engine: total,
                transactions: total,
                shared: true,
            };
        }
        let claims = (total / 10).clamp(1, CLAIM_CONNECTIONS);
        let engine = (total / 5).clamp(1, ENGINE_CONNECTIONS);
        Budget {
            claims,
            engine,
            transactions: total - claims - engine,
            shared: false,
        }
    }

    /// The smallest [`PgOptions::max_connections`] whose share leaves `transactions`
    /// connections for transactions.
    pub fn total_for(transactions: u32) -> u32 {
        // The other pools take at most CLAIM_CONNECTIONS + ENGINE_CONNECTIONS, so the
        // answer lies within that many of `transactions`.
        (transactions..=transactions.saturating_add(CLAIM_CONNECTIONS + ENGINE_CONNECTIONS))
            .find(|&t| Budget::of(t).transactions >= transactions)
            .unwrap_or(u32::MAX)
    }
}

/// Session settings of the claim and engine pools that make each of their prepared
/// statements use one generic plan. Under PostgreSQL's default (`auto`) the claim, the
/// insert and complete-many (whose arrays' lengths a custom plan sees) were planned
/// afresh on every execution: 0.4–0.9 ms of a single enqueue's 1.3 ms (measured in
/// `docs/performance.md`). These statements have the same best plan for any parameters
/// (claims walk the claim index, the rest go by primary key); the main pool keeps
/// `auto`, which the caller's queries and the listings (whose partial indexes a
/// parameter may select) need.
pub const GENERIC_PLANS: [(&str, &str); 1] = [("plan_cache_mode", "force_generic_plan")];
/// Planner settings of the connections that run claims. A claim must walk the claim index
/// in claim order and stop after `limit` rows; with statistics that no longer describe
/// the table (it filled faster than autoanalyze, or most of it is finished history), the
/// planner judged the waiting jobs few and chose a bitmap scan that sorted every waiting
/// job of the queue on each claim, so a claim's cost grew with the backlog (measured in
/// `docs/performance.md`). These settings make the ordered index scan the only plan
/// without a penalty; they apply to idem's claim statements only, never to the caller's
/// queries on the main pool.
pub const CLAIM_PLANNER: [(&str, &str); 3] = [
    ("enable_bitmapscan", "off"),
    ("enable_seqscan", "off"),
    ("enable_sort", "off"),
];
/// Session settings of every connection, sent as startup options after the URL's own (so
/// they win over the URL, the role's and the database's defaults). idem's SQL assumes
/// READ COMMITTED: a statement that waited for a row lock re-checks its `WHERE` against
/// the row's latest version. Under REPEATABLE READ or SERIALIZABLE the same wait ends in
/// a serialization failure instead, and a one-statement operation run straight on the
/// pool (no `BEGIN`) takes the session's default.
pub const SESSION: [(&str, &str); 1] = [("default_transaction_isolation", "read committed")];

/// The `BEGIN` of every transaction idem opens: the isolation level pinned on the
/// transaction too, so a session whose default a caller changed still runs idem's
/// statements as they were written.
pub const BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

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
    /// Most connections the store opens to the server, shared among its pools
    /// ([`Budget`]): the bound to count against the server's `max_connections`.
    pub max_connections: u32,
    /// How long an operator's action (cancel, dead-letter retry or discard) waits for a
    /// row another transaction holds, such as a worker's open effect transaction, before
    /// it gives up with [`StoreError::Busy`] instead of hanging.
    pub operator_lock_timeout: Duration,
    /// How long a transaction idem opens (its own, and one a caller opens with the
    /// store's `begin`) may sit idle between statements before PostgreSQL ends its
    /// session, releasing what it locked. An effect transaction uses what is left of
    /// its job's lease instead.
    pub idle_in_transaction_timeout: Duration,
    /// What stands between idem and the server. [`Pooler::Transaction`] (or
    /// `?pooler=transaction` in the URL) for PgBouncer in transaction mode: idem then keeps
    /// no state in the server session (see `README.md`, "Behind PgBouncer").
    pub pooler: Pooler,
    /// Behind a pooler: a URL that reaches the server directly, for the one session-scoped
    /// thing idem uses, LISTEN (wake-ups from other processes); also `?listen_url=…`
    /// (percent-encoded) in the URL. Without it, workers poll for jobs enqueued by other
    /// processes. Not used without a pooler.
    pub listen_url: Option<String>,
}

/// Default [`PgOptions::operator_lock_timeout`]: 5 s.
pub const DEFAULT_OPERATOR_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// Default [`PgOptions::idle_in_transaction_timeout`]: 10 s.
pub const DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(10);

/// PostgreSQL's largest `idle_in_transaction_session_timeout`: 2^31 - 1 ms.
const MAX_IDLE_IN_TRANSACTION_MS: u128 = i32::MAX as u128;

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            schema: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            operator_lock_timeout: DEFAULT_OPERATOR_LOCK_TIMEOUT,
            idle_in_transaction_timeout: DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT,
            pooler: Pooler::None,
            listen_url: None,
        }
    }
}

impl PgOptions {
    /// Checks the settings; the error names the bad value and what is expected.
    pub fn validate(&self) -> StoreResult<()> {
        if self.operator_lock_timeout.is_zero() {
            return Err(StoreError::Config(
                "operator_lock_timeout is 0, which PostgreSQL reads as no timeout; give a \
                 duration above zero (5 s is the default)"
                    .into(),
            ));
        }
        let idle_ms = self.idle_in_transaction_timeout.as_millis();
        if !(1..=MAX_IDLE_IN_TRANSACTION_MS).contains(&idle_ms) {
            return Err(StoreError::Config(format!(
                "idle_in_transaction_timeout is {:?}; give 1 ms to {MAX_IDLE_IN_TRANSACTION_MS} ms \
                 (PostgreSQL's range; 0 would mean no timeout; 10 s is the default)",
                self.idle_in_transaction_timeout
            )));
        }
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

/// Whether `s` is a schema name idem accepts: `[a-z_][a-z0-9_]*`, at most
/// [`MAX_SCHEMA_LEN`] characters.
pub(crate) fn is_plain_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    first_ok
        && s.len() <= MAX_SCHEMA_LEN
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// A duration in whole milliseconds as the text a duration setting takes (`set_config`).
pub(crate) fn millis_text(d: Duration) -> String {
    d.as_millis().max(1).to_string()
}

/// Parses `url` after checking it names PostgreSQL.
pub(crate) fn connect_options(url: &str) -> StoreResult<PgConnectOptions> {
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
/// credentials fail now with their cause, and creates the schema if one is set and
/// `create`; without `create` a missing schema is [`StoreError::NotFound`].
pub(crate) async fn probe(
    url: &str,
    connect: &PgConnectOptions,
    schema: Option<&str>,
    create: bool,
) -> StoreResult<()> {
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
    match schema {
        Some(schema) if create => create_schema(&mut conn, schema).await?,
        Some(schema) => require_schema(&mut conn, url, schema).await?,
        None => {}
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

/// [`StoreError::NotFound`] unless `schema` exists; creates nothing. In a transaction,
/// so that behind a pooler the statement's two round trips reach one server session.
async fn require_schema(conn: &mut sqlx::PgConnection, url: &str, schema: &str) -> StoreResult<()> {
    let mut tx = conn.begin().await.map_err(interpret_error)?;
    let exists: bool = sqlx::query_scalar(include_str!("../queries/migration/schema_exists.sql"))
        .bind(schema)
        .fetch_one(&mut *tx)
        .await
        .map_err(interpret_error)?;
    tx.commit().await.map_err(interpret_error)?;
    match exists {
        true => Ok(()),
        false => Err(StoreError::not_found(format!(
            "schema {schema} in {}",
            redact(url)
        ))),
    }
}

/// An error of the probe connection; a database that does not exist (SQLSTATE 3D000, or
/// PgBouncer's `database "…" does not exist`, which has another code) is
/// [`StoreError::NotFound`] naming the URL, as a missing SQLite file is.
fn open_error(url: &str, e: sqlx::Error) -> StoreError {
    let url = redact(url);
    let db = e.as_database_error();
    let code = db.and_then(|d| d.code());
    let no_database = db.is_some_and(|d| {
        d.message().starts_with("database \"") && d.message().ends_with("\" does not exist")
    });
    if code.as_deref() == Some("3D000") || no_database {
        return StoreError::not_found(format!("PostgreSQL database {url}"));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_shares_the_setting_and_never_exceeds_it() {
        for total in 1..=500 {
            let b = Budget::of(total);
            let opened = match b.shared {
                true => b.transactions,
                false => b.claims + b.engine + b.transactions,
            };
            assert_eq!(opened, total, "{total}: {b:?}");
            assert!(
                b.claims >= 1 && b.engine >= 1 && b.transactions >= 1,
                "{b:?}"
            );
            assert!(b.claims <= CLAIM_CONNECTIONS && b.engine <= ENGINE_CONNECTIONS);
            let t = Budget::total_for(b.transactions);
            assert!(t <= total && Budget::of(t).transactions >= b.transactions);
            assert!(t == 1 || Budget::of(t - 1).transactions < b.transactions);
        }
        assert!(Budget::of(2).shared && !Budget::of(3).shared);
        assert_eq!(
            Budget::of(DEFAULT_MAX_CONNECTIONS),
            Budget {
                claims: 2,
                engine: 5,
                transactions: 18,
                shared: false
            }
        );
        assert_eq!(Budget::of(100).transactions, 88);
    }
}
