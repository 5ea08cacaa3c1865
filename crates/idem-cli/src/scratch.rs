//! A scratch database for `idem demo` and `idem bench`: a temporary SQLite file when no
//! URL is given, a fresh PostgreSQL schema for a `postgres://` URL (dropped afterwards),
//! or the SQLite file the URL names when it holds no tables yet.
//!
//! What must stay true: these commands never write into a user's database. Their URL
//! comes only from their own command line ([`ScratchArgs`]; `IDEM_DATABASE_URL` is not
//! read), and an SQLite file that already holds a table is refused before anything opens
//! it for writing.

use std::path::Path;
use std::sync::Arc;

use clap::Args;
use idem::{Idem, Store};
use idem_postgres::{PgOptions, PgStore};
use serde::Serialize;

use crate::exit::{Exit, fail};

/// The database flags of a command that works on scratch data.
#[derive(Args, Clone, Serialize)]
pub struct ScratchArgs {
    /// Run here instead of in a temporary SQLite file. postgres://…: in a fresh schema,
    /// dropped afterwards. sqlite://path: a file that does not exist yet or holds no
    /// tables (one that does is refused), kept afterwards. IDEM_DATABASE_URL is not read
    #[arg(long, value_name = "URL")]
    #[serde(skip)]
    pub database_url: Option<String>,
    /// Keep the temporary SQLite file or PostgreSQL schema afterwards
    #[arg(long)]
    pub keep: bool,
}

/// The scratch database and how to clean it up.
pub struct Scratch {
    /// A client on it, migrated.
    pub idem: Idem,
    /// A URL other processes (and other stores) can use to reach the same database.
    pub url: String,
    /// What it is, for the report.
    pub label: String,
    cleanup: Cleanup,
}

enum Cleanup {
    TempDir(tempfile::TempDir),
    Schema(String),
    Nothing,
}

/// Opens the scratch database for `purpose` (`demo`, `bench`); `sqlite_query` is appended
/// to a temporary SQLite file's URL (e.g. `?synchronous=normal`).
pub async fn open(
    url: Option<String>,
    purpose: &str,
    sqlite_query: &str,
) -> anyhow::Result<Scratch> {
    match url {
        None => {
            let dir = tempfile::Builder::new()
                .prefix(&format!("idem-{purpose}-"))
                .tempdir()?;
            let path = dir.path().join(format!("{purpose}.db"));
            let url = format!("sqlite://{}{sqlite_query}", path.display());
            let idem = Idem::connect(&url).await?;
            let label = format!("SQLite, temporary file {}", path.display());
            Ok(Scratch {
                idem,
                url,
                label,
                cleanup: Cleanup::TempDir(dir),
            })
        }
        Some(url) if idem::Backend::of_url(&url) == Some(idem::Backend::Postgres) => {
            let url = url.trim().to_owned();
            let schema = format!("idem_{purpose}_{:08x}", rand::random::<u32>());
            let options = PgOptions {
                schema: Some(schema.clone()),
                ..PgOptions::default()
            };
            let store = PgStore::connect(&url, options).await?;
            store.migrate().await?;
            let idem = Idem::from_store(Arc::new(store));
            let url = idem_postgres::url_with_search_path(&url, &schema);
            let label = format!("PostgreSQL, fresh schema {schema}");
            Ok(Scratch {
                idem,
                url,
                label,
                cleanup: Cleanup::Schema(schema),
            })
        }
        Some(url) => {
            refuse_tables(&url, purpose)?;
            let idem = Idem::connect(&url).await?;
            let label = idem_postgres::redact(&url);
            Ok(Scratch {
                idem,
                url,
                label,
                cleanup: Cleanup::Nothing,
            })
        }
    }
}

impl Scratch {
    /// Drops the schema or removes the temporary file, unless `keep`.
    pub async fn finish(self, keep: bool) {
        match self.cleanup {
            Cleanup::Schema(schema) if !keep => drop_schema(&self.idem, &schema).await,
            Cleanup::Schema(schema) => eprintln!("kept schema {schema}"),
            Cleanup::TempDir(dir) if keep => eprintln!("kept {}", dir.keep().display()),
            Cleanup::TempDir(_) | Cleanup::Nothing => {}
        }
        self.idem.store().close().await;
    }
}

async fn drop_schema(idem: &Idem, schema: &str) {
    let drop = async {
        let mut tx = idem.begin().await?;
        tx.execute(&format!("DROP SCHEMA {schema} CASCADE"), &[])
            .await?;
        tx.commit().await
    };
    if let Err(e) = drop.await {
        eprintln!("could not drop schema {schema}: {e}");
    }
}

/// Refuses an SQLite file that holds a table (or is not a database): `idem {purpose}`
/// would mix its tables and jobs with the ones there. A missing or empty file is fine.
fn refuse_tables(url: &str, purpose: &str) -> anyhow::Result<()> {
    let Some(path) = sqlite_path(url) else {
        return Ok(());
    };
    let found = match count_tables(path) {
        Ok(0) => return Ok(()),
        Ok(n) => format!("already holds {n} table(s)"),
        Err(e) => format!("is not an SQLite database this can read ({e})"),
    };
    Err(fail(
        Exit::Config,
        format!(
            "{} {found}; idem {purpose} writes its own tables and jobs and will not mix them \
             with what is there. Give a path that does not exist yet, or leave out \
             --database-url to run in a temporary file",
            path.display()
        ),
    ))
}

/// The file an `sqlite://path` or `sqlite:path` URL names, without its query.
pub(crate) fn sqlite_path(url: &str) -> Option<&Path> {
    let rest = url.trim().strip_prefix("sqlite:")?.trim_start_matches("//");
    let file = rest.split_once('?').map_or(rest, |(file, _)| file);
    Some(Path::new(file))
}

/// The tables of the SQLite file at `path` (0 if it is missing or empty), read without
/// writing anything; the store's own open would switch the file to WAL. Without a `-wal`
/// file beside it, all its content is in the file, and `immutable=1` reads it without
/// creating a `-wal` or `-shm`; with one, it is read as any reader would, which writes
/// read marks into the `-shm` index and never into the database.
fn count_tables(path: &Path) -> rusqlite::Result<i64> {
    use rusqlite::OpenFlags;
    let wal = Path::new(&format!("{}-wal", path.display())).exists();
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(0);
    };
    if meta.len() == 0 && !wal {
        return Ok(0);
    }
    let conn = if wal {
        rusqlite::Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?
    } else {
        let uri = format!("file:{}?immutable=1", uri_path(path));
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI;
        rusqlite::Connection::open_with_flags(uri, flags)?
    };
    let sql = "SELECT count(*) FROM sqlite_schema WHERE type = 'table'";
    conn.query_row(sql, [], |row| row.get(0))
}

/// A path as the path part of an SQLite `file:` URI.
fn uri_path(path: &Path) -> String {
    let path = path.display().to_string();
    path.replace('%', "%25")
        .replace('?', "%3f")
        .replace('#', "%23")
}

/// The first column of the first row of a read statement, as an integer (a count, a sum).
pub async fn scalar(idem: &idem::Idem, sql: &str, args: &[idem::SqlValue]) -> anyhow::Result<i64> {
    let rows = idem.store().query(sql, args).await?;
    match rows.first().and_then(|r| r.first()) {
        Some(idem::SqlValue::Int(n)) => Ok(*n),
        other => anyhow::bail!("unexpected result {other:?} for {sql}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_path_is_the_file_without_the_query() {
        let path = |url| sqlite_path(url).map(|p| p.display().to_string());
        assert_eq!(
            path("sqlite:///tmp/a.db?synchronous=normal").as_deref(),
            Some("/tmp/a.db")
        );
        assert_eq!(path("sqlite://rel/a.db").as_deref(), Some("rel/a.db"));
        assert_eq!(path("sqlite:a.db").as_deref(), Some("a.db"));
        assert_eq!(path("postgres://u@h/db"), None);
    }

    #[test]
    fn a_missing_or_empty_file_is_fine_and_one_with_a_table_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        let url = format!("sqlite://{}", db.display());
        refuse_tables(&url, "demo").unwrap();
        std::fs::write(&db, b"").unwrap();
        refuse_tables(&url, "demo").unwrap();
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch("CREATE TABLE mine (x INTEGER)").unwrap();
        drop(conn);
        let err = refuse_tables(&url, "demo").unwrap_err().to_string();
        assert!(
            err.contains(&db.display().to_string()) && err.contains("1 table"),
            "{err}"
        );
    }
}
