//! Every store operation as an async function on an executor (`E: sqlx::Executor`: the
//! pool, or a transaction's connection), or on a `&mut PgConnection` where it runs several
//! statements. One module per area, mirroring `queries/<area>/` and the same modules of
//! `idem-sqlite`, each holding the operations of that area; here, the helpers they share.
//!
//! Each guarded write names state and fence in its `WHERE` clause; zero rows is
//! `LeaseLost`. The attempt history row is written in the same transaction as the state
//! change it records. Where SQLite relies on its single writer, this store relies on row
//! locks: claims and rescues take `FOR UPDATE SKIP LOCKED`, an effect transaction holds its
//! job's row from `job_lock` to commit, and READ COMMITTED re-checks a guarded `WHERE`
//! against the latest committed row before writing it.

pub(crate) mod clock;
pub(crate) mod counter;
pub(crate) mod effect;
pub(crate) mod enqueue_key;
pub(crate) mod job;
pub(crate) mod job_attempt;
pub(crate) mod ledger;
pub(crate) mod purge;
pub(crate) mod queue;

use idem_store::{LeaseToken, StoreError, StoreResult};
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::{Executor, Postgres, Row};

use crate::error::interpret_error;

type Query = sqlx::query::Query<'static, Postgres, PgArguments>;

/// The row a guarded statement returned, or `LeaseLost` when it returned none (its
/// state-and-fence guard refused the claim).
async fn guarded<'e, E, T>(
    ex: E,
    q: Query,
    lease: LeaseToken,
    decode: fn(&PgRow) -> StoreResult<T>,
) -> StoreResult<T>
where
    E: Executor<'e, Database = Postgres>,
{
    match q.fetch_optional(ex).await.map_err(interpret_error)? {
        Some(r) => decode(&r),
        None => Err(StoreError::lease_lost(lease)),
    }
}

/// The record under `key` that a guarded insert found taken; none means the insert's
/// fence guard refused it, so the claim is not current.
async fn existing<'e, E, T>(
    ex: E,
    sql: &'static str,
    key: &str,
    lease: LeaseToken,
    decode: fn(&PgRow) -> StoreResult<T>,
) -> StoreResult<T>
where
    E: Executor<'e, Database = Postgres>,
{
    let q = sqlx::query(sql).bind(key.to_owned());
    guarded(ex, q, lease, decode).await
}

/// The first column of each row, an id.
fn first_ids(rows: &[PgRow]) -> StoreResult<Vec<i64>> {
    rows.iter()
        .map(|r| r.try_get::<i64, _>(0).map_err(interpret_error))
        .collect()
}
