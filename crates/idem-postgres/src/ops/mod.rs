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

pub(crate) mod batch;
pub(crate) mod clock;
pub(crate) mod counter;
pub(crate) mod effect;
pub(crate) mod enqueue_key;
pub(crate) mod http_key;
pub(crate) mod intent;
pub(crate) mod job;
pub(crate) mod job_attempt;
pub(crate) mod leader;
pub(crate) mod ledger;
pub(crate) mod purge;
pub(crate) mod queue;

use idem_store::{JobLock, LeaseToken, StoreError, StoreResult};
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::{Executor, PgConnection, Postgres, Row};

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

/// How many times a fenced `INSERT … ON CONFLICT` is tried when the record it collided
/// with was gone by the time it was read back.
pub(crate) const INSERT_TRIES: usize = 3;

/// The record holding `key`, read after a fenced insert of it inserted nothing; `None`
/// when it vanished in between: each statement of a READ COMMITTED transaction reads its
/// own snapshot, so a purge (or any delete) may commit between the insert and this read.
async fn holder<T>(
    c: &mut PgConnection,
    sql: &'static str,
    key: &str,
    decode: fn(&PgRow) -> StoreResult<T>,
) -> StoreResult<Option<T>> {
    let row = sqlx::query(sql)
        .bind(key.to_owned())
        .fetch_optional(&mut *c)
        .await
        .map_err(interpret_error)?;
    row.as_ref().map(decode).transpose()
}

/// After a fenced insert inserted nothing and no record holds its key: `Ok` when the
/// claim is current (the holder vanished; the caller inserts again), `LeaseLost` when the
/// insert's fence guard is what refused it.
async fn still_current(c: &mut PgConnection, lease: LeaseToken) -> StoreResult<()> {
    job::lock(&mut *c, JobLock::of(lease)).await.map(|_| ())
}

/// The error when a key's holder vanished on every one of [`INSERT_TRIES`] tries.
fn kept_vanishing(what: &str, key: &str) -> StoreError {
    StoreError::Busy(format!(
        "the {what} {key:?} was deleted between each of {INSERT_TRIES} inserts and its read \
         (a purge racing the claim); retrying can help"
    ))
}

/// The first column of each row, an id.
fn first_ids(rows: &[PgRow]) -> StoreResult<Vec<i64>> {
    rows.iter()
        .map(|r| r.try_get::<i64, _>(0).map_err(interpret_error))
        .collect()
}
