//! Running behind a connection pooler in transaction mode (PgBouncer's
//! `pool_mode = transaction`): what idem changes so that it keeps no state in the server
//! session, since consecutive transactions of one client connection may run on different
//! server connections, and each server connection serves many clients.
//!
//! The URL says it: `?pooler=transaction` ([`Pooler::Transaction`]). Then:
//! - no startup `options` and no `extra_float_digits` are sent (PgBouncer 1.18 refuses a
//!   startup parameter it does not track, or with `ignore_startup_parameters` drops it
//!   silently); the settings they carried (the URL's `options=-c k=v`, the store's schema
//!   as `search_path`, the claim planner's) are set with `set_config(k, v, true)` in the
//!   same round trip as each transaction's `BEGIN` ([`Pool::begin`]), so they hold for
//!   that transaction, on whichever server connection it runs;
//! - no statement is prepared by name (sqlx's statement cache is off, so every statement
//!   is parsed unnamed), and every statement runs inside a transaction, one-statement
//!   operations too ([`Pool::run`]): sqlx parses a statement (Parse, Describe, Sync) and
//!   binds it (Bind, Execute, Sync) in two round trips, and outside a transaction the
//!   pooler may hand the second to another server connection, which has no such
//!   statement;
//! - LISTEN, the one session-scoped thing idem needs, goes over a direct connection to the
//!   server when the URL names one (`listen_url=…`, percent-encoded); without it a worker
//!   polls (`poll_interval`) for jobs enqueued by other processes. NOTIFY is transactional
//!   and goes through the pooler.
//!
//! What must stay true: with [`Pooler::Transaction`], nothing that [`Pool`] runs leaves a
//! setting, a prepared statement, a lock or a subscription in the server session after its
//! transaction ends. Advisory locks are transaction-scoped (`pg_advisory_xact_lock`), and
//! every other setting idem makes is `set_config(…, true)` (`SET LOCAL`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use idem_store::{StoreError, StoreResult};
use sqlx::postgres::{PgConnection, PgPool};
use sqlx::{Postgres, Transaction};

use crate::error::interpret_error;

/// What stands between idem and the PostgreSQL server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pooler {
    /// The server itself, or a pooler in session mode: a connection is one server session.
    #[default]
    None,
    /// A pooler in transaction mode (PgBouncer's `pool_mode = transaction`): each
    /// transaction may run on another server session. Set with `?pooler=transaction`.
    Transaction,
}

/// The URL parameter that names the [`Pooler`].
pub const POOLER_PARAM: &str = "pooler";
/// The URL parameter that names a direct connection for LISTEN behind a pooler.
pub const LISTEN_URL_PARAM: &str = "listen_url";

/// What idem reads from a URL's query string before sqlx parses the rest.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct UrlSettings {
    /// The URL without idem's own parameters (and, behind a pooler, without `options`).
    pub url: String,
    /// `pooler=…`.
    pub pooler: Pooler,
    /// `listen_url=…`, decoded.
    pub listen_url: Option<String>,
    /// Behind a pooler: the `-c k=v` settings of the URL's `options`, in order.
    pub settings: Vec<(String, String)>,
}

/// Splits idem's parameters off `url`; the error names a bad value. `set` is the pooler
/// the store's options name (`PgOptions::pooler`): when the URL names none, that one
/// decides, so a pooler set in the options alone also turns the URL's `options` into
/// per-transaction settings instead of startup parameters a pooler would refuse or drop.
pub(crate) fn split_url(url: &str, set: Pooler) -> StoreResult<UrlSettings> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let pairs: Vec<(&str, String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (pair, decode(k), decode(v))
        })
        .collect();
    let mut out = UrlSettings::default();
    for (_, k, v) in &pairs {
        match k.as_str() {
            POOLER_PARAM => out.pooler = pooler_of(v)?,
            LISTEN_URL_PARAM => out.listen_url = Some(v.clone()),
            _ => {}
        }
    }
    if out.pooler == Pooler::None {
        out.pooler = set;
    }
    let pooled = out.pooler == Pooler::Transaction;
    let mut kept = Vec::new();
    for (pair, k, v) in pairs {
        match k.as_str() {
            POOLER_PARAM | LISTEN_URL_PARAM => {}
            "options" if pooled => out.settings.extend(settings_of(&v)?),
            k if pooled && k.starts_with("options[") && k.ends_with(']') => {
                let key = k["options[".len()..k.len() - 1].replace('-', "_");
                out.settings.push((key, v));
            }
            _ => kept.push(pair),
        }
    }
    out.url = match kept.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", kept.join("&")),
    };
    Ok(out)
}

fn pooler_of(v: &str) -> StoreResult<Pooler> {
    match v {
        "transaction" => Ok(Pooler::Transaction),
        "none" | "session" => Ok(Pooler::None),
        other => Err(StoreError::Config(format!(
            "{POOLER_PARAM}={other:?} is not a pooler mode; expected {POOLER_PARAM}=transaction \
             (PgBouncer's pool_mode = transaction) or {POOLER_PARAM}=session"
        ))),
    }
}

/// The `-c k=v` (or `--k=v`) settings of a libpq `options` string (backslash escapes
/// a space or a backslash). Anything else cannot become a transaction's setting.
fn settings_of(options: &str) -> StoreResult<Vec<(String, String)>> {
    let words = split_words(options);
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let word = &words[i];
        let setting = match word.as_str() {
            "-c" => {
                i += 1;
                words.get(i).map(String::as_str)
            }
            w => w.strip_prefix("-c").or_else(|| w.strip_prefix("--")),
        };
        let Some((k, v)) = setting.and_then(|s| s.split_once('=')) else {
            return Err(StoreError::Config(format!(
                "options={options:?}: behind a pooler (pooler=transaction) idem sets the URL's \
                 options in each transaction, and takes only `-c name=value` settings"
            )));
        };
        out.push((k.replace('-', "_"), v.to_owned()));
        i += 1;
    }
    Ok(out)
}

fn split_words(s: &str) -> Vec<String> {
    let mut words = vec![String::new()];
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => words.last_mut().unwrap().extend(chars.next()),
            c if c.is_whitespace() => words.push(String::new()),
            c => words.last_mut().unwrap().push(c),
        }
    }
    words.retain(|w| !w.is_empty());
    words
}

/// Percent-decoding as in a URL's query string (`+` is a space), as sqlx reads it.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |j: usize| s.get(j..j + 2).and_then(|h| u8::from_str_radix(h, 16).ok());
        match bytes[i] {
            b'%' if hex(i + 1).is_some() => {
                out.extend(hex(i + 1));
                i += 3;
                continue;
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A SQL string literal of `s`.
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The statement that opens each of idem's transactions: [`crate::BEGIN`], then in the
/// same round trip, set for the transaction only: behind a pooler `settings` (without
/// one they are the session's, from the startup options), and always the idle timeout
/// `idle` ([`crate::PgOptions::idle_in_transaction_timeout`]: a process stopped inside the
/// transaction loses its session and the rows it locked, such as a job's, instead of
/// pinning them until it resumes; a statement of the transaction may set its own, as an
/// effect transaction's fence check and the leadership statements do). A setting of the
/// defaults of transactions would only reach the transactions after this one, so
/// `default_transaction_read_only` is set as `transaction_read_only` too (which may always
/// be turned on); the isolation level is [`crate::BEGIN`]'s, as it is without a pooler.
pub(crate) fn begin_statement(
    pooler: Pooler,
    settings: &[(String, String)],
    idle: Duration,
) -> String {
    let this_transaction = |k: &str| match k {
        "default_transaction_read_only" => Some("transaction_read_only"),
        _ => None,
    };
    let behind = match pooler {
        Pooler::None => &[][..],
        Pooler::Transaction => settings,
    };
    let idle = (
        "idle_in_transaction_session_timeout".to_owned(),
        crate::connect::millis_text(idle),
    );
    let mut calls: Vec<String> = behind
        .iter()
        .flat_map(|(k, v)| {
            let also = this_transaction(k).map(|t| (t.to_owned(), v.clone()));
            std::iter::once((k.clone(), v.clone())).chain(also)
        })
        .chain(std::iter::once(idle))
        .map(|(k, v)| format!("set_config({}, {}, true)", literal(&k), literal(&v)))
        .collect();
    if pooler == Pooler::Transaction {
        // Behind a pooler each transaction may reach another server session, and the
        // pooler may be pointed at a standby without idem's connections to it ending:
        // the check of each new connection (primary.rs) is not enough, so each
        // transaction fails at once on a server in recovery.
        calls.push(format!(
            "(CASE WHEN pg_is_in_recovery() THEN {} END)::int",
            literal(IN_RECOVERY_MARK)
        ));
    }
    format!("{}; SELECT {}", crate::BEGIN, calls.join(", "))
}

/// What a transaction's `BEGIN` behind a pooler fails with on a server in recovery, as an
/// integer that does not parse (SQLSTATE 22P02); `error.rs` reports it as unavailable.
pub(crate) const IN_RECOVERY_MARK: &str =
    "idem: this server is in recovery (a standby); idem reads and writes on the primary only";

/// The future of an operation on a connection.
pub(crate) type OpFuture<'c, T> = Pin<Box<dyn Future<Output = StoreResult<T>> + Send + 'c>>;

/// A pool of connections and how idem runs its transactions and statements on it.
#[derive(Debug, Clone)]
pub(crate) struct Pool {
    /// The connections.
    pub pool: PgPool,
    /// What opens each transaction ([`begin_statement`]).
    begin: Arc<str>,
    /// [`Pooler`] of the URL.
    pooler: Pooler,
}

impl Pool {
    pub(crate) fn new(
        pool: PgPool,
        pooler: Pooler,
        settings: &[(String, String)],
        idle: Duration,
    ) -> Self {
        let begin = begin_statement(pooler, settings, idle).into();
        Pool {
            pool,
            begin,
            pooler,
        }
    }

    /// Opens a READ COMMITTED transaction (with its settings, behind a pooler).
    pub(crate) async fn begin(&self) -> StoreResult<Transaction<'static, Postgres>> {
        let begin = sqlx::AssertSqlSafe(Arc::clone(&self.begin));
        self.pool.begin_with(begin).await.map_err(interpret_error)
    }

    /// Runs `op` on a connection of the pool: straight on it (each statement its own
    /// transaction), or behind a pooler inside one transaction that commits when `op`
    /// succeeds.
    pub(crate) async fn run<T, F>(&self, op: F) -> StoreResult<T>
    where
        F: for<'c> FnOnce(&'c mut PgConnection) -> OpFuture<'c, T>,
    {
        if self.pooler == Pooler::None {
            let mut conn = self.pool.acquire().await.map_err(interpret_error)?;
            return op(&mut conn).await;
        }
        let mut tx = self.begin().await?;
        let out = op(&mut tx).await?;
        tx.commit().await.map_err(interpret_error)?;
        Ok(out)
    }

    /// Whether statements run through a pooler in transaction mode.
    pub(crate) fn pooler(&self) -> Pooler {
        self.pooler
    }

    /// Closes the pool.
    pub(crate) async fn close(&self) {
        self.pool.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(k: &str, v: &str) -> (String, String) {
        (k.to_owned(), v.to_owned())
    }

    #[test]
    fn without_a_pooler_the_url_keeps_its_options() {
        let u = split_url(
            "postgres://h/db?options=-c%20search_path%3Dx&sslmode=disable",
            Pooler::None,
        )
        .unwrap();
        assert_eq!(u.pooler, Pooler::None);
        assert_eq!(
            u.url,
            "postgres://h/db?options=-c%20search_path%3Dx&sslmode=disable"
        );
        assert!(u.settings.is_empty());
    }

    #[test]
    fn behind_a_pooler_options_become_settings_and_leave_the_url() {
        let url = "postgres://h/db?options=-c%20search_path%3Dx%20-cwork_mem%3D4MB&pooler=transaction\
                   &options[lock-timeout]=5s&listen_url=postgres%3A%2F%2Fh%3A5432%2Fdb%3Fa%3Db";
        let u = split_url(url, Pooler::None).unwrap();
        assert_eq!(u.pooler, Pooler::Transaction);
        assert_eq!(u.url, "postgres://h/db");
        assert_eq!(u.listen_url.as_deref(), Some("postgres://h:5432/db?a=b"));
        assert_eq!(
            u.settings,
            [
                s("search_path", "x"),
                s("work_mem", "4MB"),
                s("lock_timeout", "5s")
            ]
        );
    }

    #[test]
    fn escaped_spaces_and_quotes_stay_in_the_value() {
        let u = split_url(
            "postgres://h/db?pooler=transaction&options=--application_name%3Da\\%20b'c",
            Pooler::None,
        )
        .unwrap();
        assert_eq!(u.settings, [s("application_name", "a b'c")]);
        let begin = begin_statement(u.pooler, &u.settings, Duration::from_secs(10));
        assert_eq!(
            begin,
            format!(
                "{}; SELECT set_config('application_name', 'a b''c', true), \
                 set_config('idle_in_transaction_session_timeout', '10000', true), \
                 (CASE WHEN pg_is_in_recovery() THEN '{IN_RECOVERY_MARK}' END)::int",
                crate::BEGIN
            )
        );
    }

    #[test]
    fn a_pooler_set_in_the_options_alone_also_moves_the_url_options_into_settings() {
        let u = split_url(
            "postgres://h/db?options=-c%20search_path%3Dx",
            Pooler::Transaction,
        )
        .unwrap();
        assert_eq!(u.pooler, Pooler::Transaction);
        assert_eq!(u.settings, [s("search_path", "x")]);
        assert_eq!(u.url, "postgres://h/db");
    }

    #[test]
    fn a_bad_pooler_or_option_is_refused_by_name() {
        let e = split_url("postgres://h/db?pooler=statement", Pooler::None).unwrap_err();
        assert!(e.to_string().contains("pooler=\"statement\""), "{e}");
        let e = split_url(
            "postgres://h/db?pooler=transaction&options=-f%20x",
            Pooler::None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("-c name=value"), "{e}");
    }

    #[test]
    fn a_read_only_default_also_holds_for_the_transaction_itself() {
        let idle = Duration::from_millis(1500);
        let begin = begin_statement(
            Pooler::Transaction,
            &[s("default_transaction_read_only", "on")],
            idle,
        );
        assert!(
            begin.contains("set_config('transaction_read_only', 'on', true)"),
            "{begin}"
        );
        // Without a pooler the settings are the session's; the idle timeout is the
        // transaction's in both modes.
        assert_eq!(
            begin_statement(Pooler::None, &[s("a", "b")], idle),
            format!(
                "{}; SELECT set_config('idle_in_transaction_session_timeout', '1500', true)",
                crate::BEGIN
            )
        );
    }
}
