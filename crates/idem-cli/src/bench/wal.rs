//! PostgreSQL's write-ahead log position and its count of commits, to measure what a
//! stretch of work wrote.

use anyhow::Context;
use idem::{Idem, SqlValue};

use crate::scratch::scalar;

/// The server's current WAL position.
pub(super) async fn lsn(idem: &Idem) -> anyhow::Result<String> {
    let sql = "SELECT pg_current_wal_lsn()::text";
    let rows = idem.store().query(sql, &[]).await?;
    let lsn = rows
        .first()
        .and_then(|r| r.first())
        .and_then(SqlValue::as_str);
    Ok(lsn.context("no WAL position")?.to_owned())
}

/// Bytes of WAL written since `lsn`.
pub(super) async fn since(idem: &Idem, lsn: &str) -> anyhow::Result<i64> {
    let sql = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint";
    scalar(idem, sql, &[SqlValue::from(lsn)]).await
}

/// Transactions committed in the current database so far. A backend reports its own to
/// the statistics at most once a second and when it ends, so read this after the
/// processes whose work it counts have disconnected.
pub(super) async fn commits(idem: &Idem) -> anyhow::Result<i64> {
    let sql = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()";
    scalar(idem, sql, &[]).await
}
