//! The database of the operator commands (every command but demo and bench, which work
//! on scratch data): its URL, and how it is opened.
//!
//! What must stay true: only `idem migrate` creates a database or changes its schema
//! (`idem::connect_store`, then `Store::migrate`). Every other command opens what exists
//! ([`open`]: `Idem::open`), writing nothing on the way, and refuses a missing database
//! (exit 3) or a schema that is not this build's (exit 6) with the fix in the message.

use std::sync::Arc;

use idem::{Idem, IdemError, Store, StoreError};

use crate::exit::{Exit, fail};

/// Default database when neither `--database-url` nor `IDEM_DATABASE_URL` is given.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://idem.db";
/// The environment variable naming the database of the operator commands.
pub const DATABASE_URL_ENV: &str = "IDEM_DATABASE_URL";

/// The URL of the operator commands: `--database-url`, else `IDEM_DATABASE_URL`, else
/// [`DEFAULT_DATABASE_URL`].
pub fn url(flag: Option<String>) -> String {
    flag.or_else(|| std::env::var(DATABASE_URL_ENV).ok())
        .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned())
}

/// A client on the existing database at `url`, whose schema is this build's.
pub async fn open(url: &str) -> anyhow::Result<Idem> {
    open_with(url, idem::ConnectOptions::default()).await
}

/// [`open`] with the store's settings (a worker's pool size).
pub async fn open_with(url: &str, options: idem::ConnectOptions) -> anyhow::Result<Idem> {
    let idem = Idem::open_with(url, options)
        .await
        .map_err(|e| explain(url, e))?;
    tracing::info!(url = %idem_postgres::redact(url), "opened the idem database");
    Ok(idem)
}

/// The existing database at `url`, whatever its schema (for `idem migrate --status`).
pub async fn open_store(url: &str) -> anyhow::Result<Arc<dyn Store>> {
    idem::open_store(url).await.map_err(|e| explain(url, e))
}

/// `e` with what to do about it: a missing database names the command that creates one.
fn explain(url: &str, e: IdemError) -> anyhow::Error {
    let shown = idem_postgres::redact(url);
    match e {
        IdemError::Store(StoreError::NotFound { what }) => {
            let fix = match idem::Backend::of_url(url) {
                Some(idem::Backend::Postgres) => "check the URL (`idem migrate` creates idem's \
                                                  tables, not the database)"
                    .to_owned(),
                _ => format!(
                    "check the path, or run `idem migrate --database-url {shown}` to create one"
                ),
            };
            fail(
                Exit::NotFound,
                format!("no idem database: {what} not found; {fix}"),
            )
        }
        e => anyhow::Error::new(e).context(format!("cannot use the idem database {shown}")),
    }
}
