//! A scratch database for `idem demo` and `idem bench`: a temporary SQLite file when no
//! URL is given, a fresh PostgreSQL schema for a `postgres://` URL (dropped afterwards),
//! or the SQLite file the URL names.

use std::sync::Arc;

use idem::{Idem, Store};
use idem_postgres::{PgOptions, PgStore};

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

/// The first column of the first row of a read statement, as an integer (a count, a sum).
pub async fn scalar(idem: &idem::Idem, sql: &str, args: &[idem::SqlValue]) -> anyhow::Result<i64> {
    let rows = idem.store().query(sql, args).await?;
    match rows.first().and_then(|r| r.first()) {
        Some(idem::SqlValue::Int(n)) => Ok(*n),
        other => anyhow::bail!("unexpected result {other:?} for {sql}"),
    }
}
