//! PostgreSQL's write-ahead log position, to count the bytes a stretch of work wrote.

use anyhow::Context;
use idem::{Idem, SqlValue};

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
    let rows = idem.store().query(sql, &[SqlValue::from(lsn)]).await?;
    rows.first()
        .and_then(|r| r.first())
        .and_then(SqlValue::as_i64)
        .context("no WAL difference")
}
