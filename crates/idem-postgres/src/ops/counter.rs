//! Counters (`queries/counter/`): the next number of a counter, belonging to an effect key
//! and committed with the effect; a key keeps the number it got.
//!
//! PostgreSQL dialect: the counter's row lock (`lock.sql`) serialises allocations, and
//! `assign.sql` raises the counter and assigns the number in one statement (SQLite: two).

use idem_store::{CounterAssigned, CounterNext, StoreError, StoreResult};
use sqlx::PgConnection;

use crate::error::interpret_error;

pub(crate) async fn next(c: &mut PgConnection, p: CounterNext) -> StoreResult<CounterAssigned> {
    sqlx::query(include_str!("../../queries/counter/lock.sql"))
        .bind(&p.counter)
        .execute(&mut *c)
        .await
        .map_err(interpret_error)?;
    let found: Option<i64> = sqlx::query_scalar(include_str!("../../queries/counter/find.sql"))
        .bind(&p.key)
        .bind(&p.counter)
        .fetch_optional(&mut *c)
        .await
        .map_err(interpret_error)?;
    if let Some(number) = found {
        return Ok(CounterAssigned { number, new: false });
    }
    let sql = include_str!("../../queries/counter/assign.sql");
    #[cfg(feature = "chaos-break-fence")]
    let sql = crate::chaos::unfenced(sql);
    let assigned: Option<i64> = sqlx::query_scalar(sql)
        .bind(&p.counter)
        .bind(&p.key)
        .bind(p.lease.job_id)
        .bind(p.lease.fence)
        .bind(p.now)
        .fetch_optional(&mut *c)
        .await
        .map_err(interpret_error)?;
    match assigned {
        Some(number) => Ok(CounterAssigned { number, new: true }),
        None => Err(StoreError::lease_lost(p.lease)),
    }
}
