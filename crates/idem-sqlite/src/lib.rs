//! The embedded SQLite store of idem, the default (`sqlite://idem.db`).
//!
//! One file, WAL journal, `synchronous=FULL` unless told otherwise, and a busy timeout.
//! Writes go through a pool of exactly one connection and open with `BEGIN IMMEDIATE`,
//! so every write transaction holds SQLite's write lock from its first statement: claims
//! need no `SKIP LOCKED`, a fence check cannot be overtaken before commit, and several
//! processes on one file queue on the lock (up to the busy timeout) instead of failing a
//! read-to-write upgrade. Reads use a separate small pool, which WAL lets run beside the
//! writer.
//!
//! SQL lives in `queries/<area>/<op>.sql`, one statement per file, at the same paths as in
//! `idem-postgres`; migrations in `migrations/`, numbered as there.
#![warn(missing_docs)]

mod error;
mod migrate;
mod row;
mod tx;
mod value;

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use idem_store::{
    AttemptRow, Backend, JobList, JobRow, QueueCount, SqlValue, Store, StoreError, StoreResult,
    StoreTx, Timestamp,
};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

pub use error::interpret_error;
pub use tx::SqliteTx;

/// Default time a write waits for another process's write lock.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// Default number of read connections.
pub const DEFAULT_READERS: u32 = 4;

/// How durable each commit is (SQLite's `synchronous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous=FULL`: a committed transaction survives power loss. The default.
    #[default]
    Full,
    /// `synchronous=NORMAL`: in WAL mode survives a process crash; the last commits may
    /// be lost on power loss. Much faster on slow fsync.
    Normal,
}

/// Settings of an SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Commit durability.
    pub durability: Durability,
    /// How long a write waits for the write lock held by another connection or process.
    pub busy_timeout: Duration,
    /// Read connections.
    pub readers: u32,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            durability: Durability::Full,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            readers: DEFAULT_READERS,
        }
    }
}

/// An idem store in one SQLite file.
///
/// The URL may carry `?synchronous=normal` (or `full`, the default) to choose the commit
/// durability; other query parameters go to SQLite (`mode`, `vfs`, …).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `url` (`sqlite://path` or
    /// `sqlite:path`). Does not migrate; call [`Store::migrate`].
    pub async fn connect(url: &str, options: SqliteOptions) -> StoreResult<Self> {
        let connect = connect_options(url, &options)?;
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(options.busy_timeout + Duration::from_secs(20))
            .connect_with(connect.clone())
            .await
            .map_err(|e| open_error(url, e))?;
        let reader = SqlitePoolOptions::new()
            .max_connections(options.readers.max(1))
            .connect_with(connect.create_if_missing(false))
            .await
            .map_err(|e| open_error(url, e))?;
        Ok(SqliteStore { writer, reader })
    }

    /// The write pool (one connection), for callers that need sqlx directly.
    pub fn writer(&self) -> &SqlitePool {
        &self.writer
    }
}

fn connect_options(url: &str, options: &SqliteOptions) -> StoreResult<SqliteConnectOptions> {
    let Some(rest) = url.strip_prefix("sqlite:") else {
        return Err(StoreError::Config(format!(
            "{url:?} is not an SQLite URL; expected sqlite://path/to/file.db"
        )));
    };
    let path = rest.trim_start_matches("//");
    if path.is_empty() || path.starts_with(":memory:") || path.contains("mode=memory") {
        return Err(StoreError::Config(format!(
            "{url:?} names no file; idem needs a durable SQLite file, e.g. sqlite://idem.db"
        )));
    }
    let (url, durability) = take_synchronous(url, options.durability)?;
    let url = url.as_str();
    let synchronous = match durability {
        Durability::Full => SqliteSynchronous::Full,
        Durability::Normal => SqliteSynchronous::Normal,
    };
    Ok(SqliteConnectOptions::from_str(url)
        .map_err(|e| StoreError::Config(format!("cannot parse {url:?}: {e}")))?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(synchronous)
        .busy_timeout(options.busy_timeout)
        .foreign_keys(true))
}

/// Takes idem's own `synchronous=full|normal` parameter out of the URL (it overrides
/// [`SqliteOptions::durability`]); the rest of the URL goes to the driver.
fn take_synchronous(url: &str, default: Durability) -> StoreResult<(String, Durability)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), default));
    };
    let mut durability = default;
    let mut kept = Vec::new();
    for param in query.split('&').filter(|p| !p.is_empty()) {
        match param.split_once('=') {
            Some(("synchronous", value)) => {
                durability = match value.to_ascii_lowercase().as_str() {
                    "full" => Durability::Full,
                    "normal" => Durability::Normal,
                    other => {
                        return Err(StoreError::Config(format!(
                            "synchronous={other} in {url:?} is not supported; use \
                             synchronous=full (the default) or synchronous=normal"
                        )));
                    }
                }
            }
            _ => kept.push(param),
        }
    }
    let url = match kept.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", kept.join("&")),
    };
    Ok((url, durability))
}

fn open_error(url: &str, e: sqlx::Error) -> StoreError {
    match interpret_error(e) {
        StoreError::Database(msg) | StoreError::Unavailable(msg) => {
            StoreError::Unavailable(format!("cannot open {url}: {msg}"))
        }
        other => other,
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    async fn migrate(&self) -> StoreResult<usize> {
        migrate::run(&self.writer).await
    }

    async fn begin(&self) -> StoreResult<Box<dyn StoreTx>> {
        Ok(Box::new(SqliteTx::begin(&self.writer).await?))
    }

    async fn now(&self) -> StoreResult<Timestamp> {
        let ms: i64 = sqlx::query_scalar(include_str!("../queries/clock/now.sql"))
            .fetch_one(&self.reader)
            .await
            .map_err(interpret_error)?;
        row::ms_to_ts(ms)
    }

    async fn job_get(&self, id: i64) -> StoreResult<Option<JobRow>> {
        let row = sqlx::query(include_str!("../queries/job/get.sql"))
            .bind(id)
            .fetch_optional(&self.reader)
            .await
            .map_err(interpret_error)?;
        row.as_ref().map(row::job).transpose()
    }

    async fn job_list(&self, p: JobList) -> StoreResult<Vec<JobRow>> {
        let rows = sqlx::query(include_str!("../queries/job/list.sql"))
            .bind(p.state.map(|s| s.as_str()))
            .bind(p.queue)
            .bind(p.kind)
            .bind(p.before_id)
            .bind(i64::from(p.limit))
            .fetch_all(&self.reader)
            .await
            .map_err(interpret_error)?;
        rows.iter().map(row::job).collect()
    }

    async fn job_attempts(&self, job_id: i64) -> StoreResult<Vec<AttemptRow>> {
        let rows = sqlx::query(include_str!("../queries/job_attempt/list.sql"))
            .bind(job_id)
            .fetch_all(&self.reader)
            .await
            .map_err(interpret_error)?;
        rows.iter().map(row::attempt).collect()
    }

    async fn queue_counts(&self) -> StoreResult<Vec<QueueCount>> {
        let rows = sqlx::query(include_str!("../queries/queue/counts.sql"))
            .fetch_all(&self.reader)
            .await
            .map_err(interpret_error)?;
        rows.iter().map(row::queue_count).collect()
    }

    async fn query(&self, sql: &str, args: &[SqlValue]) -> StoreResult<Vec<Vec<SqlValue>>> {
        let rows = value::bind_all(sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())), args)?
            .fetch_all(&self.reader)
            .await
            .map_err(interpret_error)?;
        rows.iter().map(value::decode_row).collect()
    }

    async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synchronous_comes_out_of_the_url() {
        let (url, d) =
            take_synchronous("sqlite://a.db?synchronous=NORMAL", Durability::Full).expect("parsed");
        assert_eq!((url.as_str(), d), ("sqlite://a.db", Durability::Normal));
        let (url, d) = take_synchronous(
            "sqlite://a.db?mode=rwc&synchronous=full",
            Durability::Normal,
        )
        .expect("parsed");
        assert_eq!(
            (url.as_str(), d),
            ("sqlite://a.db?mode=rwc", Durability::Full)
        );
        let (url, d) = take_synchronous("sqlite://a.db", Durability::Normal).expect("parsed");
        assert_eq!((url.as_str(), d), ("sqlite://a.db", Durability::Normal));
        let err = take_synchronous("sqlite://a.db?synchronous=off", Durability::Full).unwrap_err();
        assert!(err.to_string().contains("synchronous=off"), "{err}");
    }
}
