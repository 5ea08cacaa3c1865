//! Embedded migrations for PostgreSQL, applied by one entry point in one transaction, and
//! the schema's status, read without writing anything (so also in a read-only session).
//!
//! What must stay true: the migrations are numbered and named as in `idem-sqlite`; the
//! first statement of the transaction takes the advisory lock [`MIGRATION_LOCK_KEY`], so
//! concurrent migrators (several workers starting at once) run one after another and the
//! later ones find nothing to do; PostgreSQL's DDL is transactional, so a failed migration
//! leaves nothing behind.

use idem_store::StoreResult;
use idem_store::Timestamp;
use idem_store::migration::{COUNT, Migration, SchemaMigration, SchemaStatus, pending, with_sql};
use sqlx::PgConnection;

use crate::error::interpret_error;
use crate::pooler::Pool;

/// The key of the transaction-level advisory lock that serialises migrators: the ASCII
/// bytes of "idem" (0x6964656d). Shared by every schema of a database, so migrators of
/// different schemas wait for each other too, which costs little and keeps one key.
pub(crate) const MIGRATION_LOCK_KEY: i64 = 0x6964_656d;

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
        include_str!("../migrations/0014_job_trace.sql"),
        include_str!("../migrations/0015_state_checks.sql"),
        include_str!("../migrations/0016_job_awaits_intent.sql"),
        include_str!("../migrations/0017_job_awaited_intent.sql"),
        include_str!("../migrations/0018_leader.sql"),
    ])
}

/// Applies pending migrations in one transaction under the advisory lock, opened as
/// every transaction is (`Pool::begin`: so a process stopped inside it does not hold the
/// lock, and every other process's migration, past the idle timeout); returns how many
/// ran.
pub(crate) async fn run(pool: &Pool) -> StoreResult<usize> {
    let mut tx = pool.begin().await?;
    sqlx::query(include_str!("../queries/migration/lock.sql"))
        .bind(MIGRATION_LOCK_KEY)
        .execute(&mut *tx)
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
    let all = migrations();
    let todo = pending(&all, &applied)?;
    for m in &todo {
        sqlx::raw_sql(m.sql)
            .execute(&mut *tx)
            .await
            .map_err(|e| m.failed(interpret_error(e)))?;
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

/// Where the schema stands ([`idem_store::Store::schema_status`]): two reads, and no
/// migrations table created where there is none.
pub(crate) async fn status(pool: &Pool) -> StoreResult<SchemaStatus> {
    pool.run(|c| Box::pin(status_on(c))).await
}

async fn status_on(c: &mut PgConnection) -> StoreResult<SchemaStatus> {
    let exists: bool = sqlx::query_scalar(include_str!("../queries/migration/exists.sql"))
        .fetch_one(&mut *c)
        .await
        .map_err(interpret_error)?;
    if !exists {
        return Ok(SchemaStatus::of(Vec::new()));
    }
    let rows: Vec<(i64, String, Timestamp)> =
        sqlx::query_as(include_str!("../queries/migration/list.sql"))
            .fetch_all(c)
            .await
            .map_err(interpret_error)?;
    let recorded = rows
        .into_iter()
        .map(|(version, name, applied_at)| SchemaMigration {
            version,
            name,
            applied_at: Some(applied_at),
        })
        .collect();
    Ok(SchemaStatus::of(recorded))
}
