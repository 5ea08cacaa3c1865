//! Embedded migrations for SQLite, applied under the write lock by one entry point, and
//! the schema's status, read without writing anything.

use idem_store::StoreResult;
use idem_store::migration::{COUNT, Migration, SchemaMigration, SchemaStatus, pending, with_sql};
use rusqlite::Connection;

use crate::error::interpret_error;
use crate::row::ms_to_ts;

/// This store's SQL for each migration of [`idem_store::migration::NAMES`], in order.
pub(crate) fn migrations() -> [Migration; COUNT] {
    with_sql([
        include_str!("../migrations/0001_job.sql"),
        include_str!("../migrations/0002_effect.sql"),
        include_str!("../migrations/0003_ledger.sql"),
        include_str!("../migrations/0004_counter.sql"),
        include_str!("../migrations/0005_enqueue_key.sql"),
        include_str!("../migrations/0006_counter_number_key.sql"),
        include_str!("../migrations/0007_enqueue_key_window.sql"),
        include_str!("../migrations/0008_job_snoozes.sql"),
        include_str!("../migrations/0009_intent.sql"),
        include_str!("../migrations/0010_job_enqueue_key.sql"),
        include_str!("../migrations/0011_http_key.sql"),
        include_str!("../migrations/0012_batch.sql"),
        include_str!("../migrations/0013_queue_pause.sql"),
    ])
}

/// Applies pending migrations; returns how many ran. Runs on the writer thread inside
/// the caller's `BEGIN IMMEDIATE` transaction, so all of them commit together or none.
pub(crate) fn run(c: &Connection) -> StoreResult<usize> {
    c.execute_batch(include_str!("../migrations/0000_migration_table.sql"))
        .map_err(interpret_error)?;
    let applied = applied(c)?;
    let all = migrations();
    let todo = pending(&all, &applied)?;
    for m in &todo {
        c.execute_batch(m.sql)
            .map_err(|e| m.failed(interpret_error(e)))?;
        let mut record = c
            .prepare_cached(include_str!("../queries/migration/record.sql"))
            .map_err(interpret_error)?;
        record
            .execute(rusqlite::params![m.version, m.name])
            .map_err(interpret_error)?;
    }
    Ok(todo.len())
}

fn applied(c: &Connection) -> StoreResult<Vec<i64>> {
    let mut stmt = c
        .prepare(include_str!("../queries/migration/applied.sql"))
        .map_err(interpret_error)?;
    let versions = stmt
        .query_map([], |r| r.get(0))
        .map_err(interpret_error)?
        .collect::<rusqlite::Result<Vec<i64>>>();
    versions.map_err(interpret_error)
}

/// Where the schema stands ([`idem_store::Store::schema_status`]): runs on a read
/// connection and never creates the migrations table.
pub(crate) fn status(c: &Connection) -> StoreResult<SchemaStatus> {
    let exists: i64 = c
        .query_row(include_str!("../queries/migration/exists.sql"), [], |r| {
            r.get(0)
        })
        .map_err(interpret_error)?;
    if exists == 0 {
        return Ok(SchemaStatus::of(Vec::new()));
    }
    let mut stmt = c
        .prepare(include_str!("../queries/migration/list.sql"))
        .map_err(interpret_error)?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)?)))
        .map_err(interpret_error)?;
    let mut recorded = Vec::new();
    for row in rows {
        let (version, name, applied_ms) = row.map_err(interpret_error)?;
        recorded.push(SchemaMigration {
            version,
            name,
            applied_at: Some(ms_to_ts(applied_ms)?),
        });
    }
    Ok(SchemaStatus::of(recorded))
}
