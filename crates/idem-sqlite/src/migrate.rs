//! Embedded migrations for SQLite, applied under the write lock by one entry point.

use idem_store::StoreResult;
use idem_store::migration::{Migration, pending};
use sqlx::SqlitePool;

use crate::error::interpret_error;

/// Every migration, numbered as in `idem-postgres`.
pub(crate) const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "job",
    sql: include_str!("../migrations/0001_job.sql"),
}];

/// Applies pending migrations in one `BEGIN IMMEDIATE` transaction; returns how many ran.
pub(crate) async fn run(pool: &SqlitePool) -> StoreResult<usize> {
    let mut tx = pool
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(interpret_error)?;
    sqlx::raw_sql(include_str!("../migrations/0000_migration_table.sql"))
        .execute(&mut *tx)
        .await
        .map_err(interpret_error)?;
    let applied: Vec<i64> = sqlx::query_scalar(include_str!("../queries/migration/applied.sql"))
        .fetch_all(&mut *tx)
        .await
        .map_err(interpret_error)?;
    let todo = pending(MIGRATIONS, &applied)?;
    for m in &todo {
        sqlx::raw_sql(m.sql)
            .execute(&mut *tx)
            .await
            .map_err(|e| migration_error(m, e))?;
        sqlx::query(include_str!("../queries/migration/record.sql"))
            .bind(m.version)
            .bind(m.name)
            .execute(&mut *tx)
            .await
            .map_err(interpret_error)?;
    }
    tx.commit().await.map_err(interpret_error)?;
    Ok(todo.len())
}

fn migration_error(m: &Migration, e: sqlx::Error) -> idem_store::StoreError {
    idem_store::StoreError::Migration(format!(
        "migration {:04}_{} failed: {}",
        m.version,
        m.name,
        interpret_error(e)
    ))
}
