//! [`TestDb`]: one fresh, migrated database per test, on either store.
//!
//! SQLite: a new file in a temporary directory that lives as long as the [`TestDb`].
//! PostgreSQL: a new schema `idem_test_<random>` on the server named by
//! `IDEM_TEST_PG_URL`, which the store creates and puts on every connection's
//! `search_path`; [`TestDb::cleanup`] drops it.
//!
//! What must stay true:
//! - [`TestDb::url`] reaches the same database from another store or process: for
//!   PostgreSQL it carries `options=-c search_path=<schema>`, which sqlx 0.9 passes to the
//!   server as a startup option;
//! - a PostgreSQL test never skips silently: without `IDEM_TEST_PG_URL` it prints a notice
//!   (or panics when `CI` is set), and an unreachable server is a panic, not a skip.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::FutureExt;
use idem_postgres::{PgOptions, PgStore};
use idem_sqlite::{SqliteOptions, SqliteStore};
use idem_store::{Store, StoreError, StoreResult};
use tempfile::TempDir;

pub use idem_store::Backend;

/// The environment variable naming the PostgreSQL server the tests use, e.g.
/// `postgres://postgres@127.0.0.1:5432/test`.
pub use idem_store::testing::PG_URL_ENV;
use idem_store::testing::{PgUrlChoice, pg_url_from_env};

/// Connections per PostgreSQL test store: enough for the concurrency cases, few enough
/// that parallel tests stay under the server's `max_connections`.
pub const PG_TEST_MAX_CONNECTIONS: u32 = 16;

/// A fresh, migrated database owned by one test.
///
/// ```
/// use idem_store_tests::TestDb;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let db = TestDb::sqlite().await;
/// assert!(db.url.starts_with("sqlite://"));
/// assert_eq!(db.store.migrate().await.unwrap(), 0, "already migrated");
/// db.cleanup().await;
/// # }
/// ```
pub struct TestDb {
    /// The store, migrated.
    pub store: Arc<dyn Store>,
    /// Which store this is.
    pub backend: Backend,
    /// A connection string that reaches the same database from another store or process.
    pub url: String,
    /// Keeps the SQLite file's directory alive; `None` on PostgreSQL.
    dir: Option<TempDir>,
    /// The PostgreSQL schema to drop; `None` on SQLite.
    schema: Option<String>,
}

impl TestDb {
    /// A fresh SQLite file in a new temporary directory, migrated.
    pub async fn sqlite() -> TestDb {
        let dir = tempfile::Builder::new()
            .prefix("idem-test-")
            .tempdir()
            .expect("cannot create a temporary directory for the test database");
        let url = format!("sqlite://{}", dir.path().join("idem.db").display());
        let store = SqliteStore::connect(&url, SqliteOptions::default())
            .await
            .unwrap_or_else(|e| panic!("cannot open the test database {url}: {e}"));
        let store: Arc<dyn Store> = Arc::new(store);
        migrate(&store, &url).await;
        TestDb {
            store,
            backend: Backend::Sqlite,
            url,
            dir: Some(dir),
            schema: None,
        }
    }

    /// A fresh schema `idem_test_<random>` on the server named by `IDEM_TEST_PG_URL`,
    /// migrated.
    ///
    /// Returns `None` after printing a skip notice when the variable is unset and `CI` is
    /// not set. Panics when `CI` is set but the variable is not, and when the server
    /// cannot be reached: a PostgreSQL test never skips silently.
    pub async fn postgres() -> Option<TestDb> {
        match pg_url_from_env() {
            PgUrlChoice::Use(base) => Some(TestDb::postgres_at(&base).await),
            PgUrlChoice::Skip(notice) => {
                skip_notice(&notice);
                None
            }
            PgUrlChoice::Fail(why) => panic!("{why}"),
        }
    }

    /// A fresh schema on the server at `base`, migrated; panics when it cannot be made.
    pub async fn postgres_at(base: &str) -> TestDb {
        let schema = format!("idem_test_{:016x}", rand::random::<u64>());
        let options = PgOptions {
            schema: Some(schema.clone()),
            max_connections: PG_TEST_MAX_CONNECTIONS,
            ..PgOptions::default()
        };
        let store = PgStore::connect(base, options).await.unwrap_or_else(|e| {
            let base = idem_postgres::redact(base);
            panic!(
                "{PG_URL_ENV}={base} is set but the test schema {schema} cannot be created \
                 there: {e}. Start the server (e.g. `pg_ctlcluster 15 main start`) or unset \
                 {PG_URL_ENV} to skip the PostgreSQL tests."
            )
        });
        let store: Arc<dyn Store> = Arc::new(store);
        let url = idem_postgres::url_with_search_path(base, &schema);
        migrate(&store, &url).await;
        TestDb {
            store,
            backend: Backend::Postgres,
            url,
            dir: None,
            schema: Some(schema),
        }
    }

    /// A fresh database of `backend`; `None` only for a skipped PostgreSQL database (see
    /// [`TestDb::postgres`]).
    pub async fn new(backend: Backend) -> Option<TestDb> {
        match backend {
            Backend::Sqlite => Some(TestDb::sqlite().await),
            Backend::Postgres => TestDb::postgres().await,
        }
    }

    /// Drops the PostgreSQL schema (`CASCADE`), closes the store, and removes the SQLite
    /// file's directory. Panics when the database cannot be removed.
    pub async fn cleanup(self) {
        if let Some(schema) = &self.schema {
            drop_schema(self.store.as_ref(), schema).await;
        }
        self.store.close().await;
        if let Some(dir) = self.dir {
            let path = dir.path().to_owned();
            dir.close()
                .unwrap_or_else(|e| panic!("cannot remove {}: {e}", path.display()));
        }
    }
}

/// Opens another store on `url` (`sqlite://…` or `postgres://…`), as another process
/// would. Does not migrate.
pub async fn open_store(url: &str) -> StoreResult<Arc<dyn Store>> {
    if url.starts_with("sqlite:") {
        let store = SqliteStore::connect(url, SqliteOptions::default()).await?;
        Ok(Arc::new(store))
    } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        let options = PgOptions {
            schema: None,
            max_connections: PG_TEST_MAX_CONNECTIONS,
            ..PgOptions::default()
        };
        Ok(Arc::new(PgStore::connect(url, options).await?))
    } else {
        Err(StoreError::Config(format!(
            "{url:?} names no known store; expected sqlite://… or postgres://…"
        )))
    }
}

/// Opens another store on the existing database at `url` with the store's
/// `open_existing`, which creates nothing and writes nothing on the way (a read-only
/// session can open it). Does not migrate.
pub async fn open_existing_store(url: &str) -> StoreResult<Arc<dyn Store>> {
    if url.starts_with("sqlite:") {
        let store = SqliteStore::open_existing(url, SqliteOptions::default()).await?;
        Ok(Arc::new(store))
    } else {
        let options = PgOptions {
            max_connections: PG_TEST_MAX_CONNECTIONS,
            ..PgOptions::default()
        };
        Ok(Arc::new(PgStore::open_existing(url, options).await?))
    }
}

/// Runs one case on a fresh database of `backend` and cleans it up, also when the case
/// panics (the panic is resumed afterwards). What [`crate::store_cases!`] expands to.
#[doc(hidden)]
pub async fn run_case<F>(backend: Backend, name: &str, case: F)
where
    F: AsyncFnOnce(&TestDb),
{
    let Some(db) = TestDb::new(backend).await else {
        eprintln!("{backend}::{name}: skipped (no PostgreSQL server configured)");
        return;
    };
    let outcome = AssertUnwindSafe(case(&db)).catch_unwind().await;
    let Err(panic) = outcome else {
        db.cleanup().await;
        return;
    };
    // Clean up after a failed case too, but never let a cleanup failure hide the case's.
    if AssertUnwindSafe(db.cleanup()).catch_unwind().await.is_err() {
        eprintln!("{backend}::{name}: cleanup after the failure failed as well");
    }
    std::panic::resume_unwind(panic);
}

/// Runs `fut` and panics with `what` if it does not finish within `secs` seconds: a guard
/// that turns a deadlock into a failure. Never a way to wait for an event.
pub async fn within<T>(secs: u64, what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(secs), fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: did not finish within {secs} s (deadlock?)"))
}

/// The PostgreSQL server process serving `tx` (`pg_backend_pid()`), to watch its session
/// end.
pub async fn backend_pid(tx: &mut dyn idem_store::StoreTx) -> i64 {
    let rows = tx.query("SELECT pg_backend_pid()::bigint", &[]).await;
    let rows = rows.expect("pg_backend_pid()");
    rows[0][0].as_i64().expect("a pid")
}

/// Waits (at most 10 s) until the PostgreSQL session of server process `pid` has ended,
/// as the idle-in-transaction timeout ends one, watching `pg_stat_activity` from `store`.
pub async fn until_session_ends(store: &dyn Store, pid: i64) {
    let sql = "SELECT count(*) FROM pg_stat_activity WHERE pid = $1";
    within(10, "the idle session ends", async {
        loop {
            let rows = store
                .query(sql, &[pid.into()])
                .await
                .expect("pg_stat_activity");
            if rows[0][0].as_i64() == Some(0) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
}

async fn migrate(store: &Arc<dyn Store>, url: &str) {
    store.migrate().await.unwrap_or_else(|e| {
        let url = idem_postgres::redact(url);
        panic!("cannot migrate the test database {url}: {e}")
    });
}

/// Prints the skip notice: once per process past the test harness's output capture, so
/// it shows in a plain `cargo test`, and on every call to the (captured) test output.
fn skip_notice(notice: &str) {
    static SHOWN: AtomicBool = AtomicBool::new(false);
    if !SHOWN.swap(true, Ordering::Relaxed) {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "{notice}");
    }
    eprintln!("{notice}");
}

async fn drop_schema(store: &dyn Store, schema: &str) {
    let sql = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
    let drop = async {
        let mut tx = store.begin().await?;
        tx.execute(&sql, &[]).await?;
        tx.commit().await
    };
    let result = within(60, &format!("dropping the test schema {schema}"), drop).await;
    if let Err(e) = result {
        panic!("cannot drop the test schema {schema}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    #[should_panic(expected = "cannot be created there")]
    async fn an_unreachable_server_panics() {
        TestDb::postgres_at("postgres://postgres@127.0.0.1:1/test").await;
    }
}
