//! Effect keys (`queries/effect/`): the claim that records a key in the effect's own
//! transaction (the table's unique key decides, guarded by the claim's fence), and the
//! keys of other kinds a job has recorded, and every key of a job.

use idem_store::{EffectClaim, EffectClaimed, EffectList, EffectRecord, StoreResult};
use sqlx::{Executor, PgConnection, Postgres};

use super::{INSERT_TRIES, holder, kept_vanishing, still_current};
use crate::error::interpret_error;
use crate::row;

/// Claims the key: `New` when this transaction inserted it, else the record that holds
/// it. A holder that vanished before it could be read (purged meanwhile) is no reason to
/// refuse a current claim: the insert is tried again, up to [`INSERT_TRIES`] times.
pub(crate) async fn claim(c: &mut PgConnection, p: EffectClaim) -> StoreResult<EffectClaimed> {
    for _ in 0..INSERT_TRIES {
        if insert(c, &p).await? {
            return Ok(EffectClaimed::New);
        }
        let get = include_str!("../../queries/effect/get.sql");
        if let Some(record) = holder(c, get, &p.key, row::effect).await? {
            return Ok(EffectClaimed::Done(record));
        }
        still_current(c, p.lease).await?;
    }
    Err(kept_vanishing("effect key", &p.key))
}

/// One fenced insert of the key; whether it inserted.
async fn insert(c: &mut PgConnection, p: &EffectClaim) -> StoreResult<bool> {
    let sql = include_str!("../../queries/effect/claim.sql");
    #[cfg(feature = "chaos-break-fence")]
    let sql = crate::chaos::unfenced(sql);
    let inserted: Option<String> = sqlx::query_scalar(sql)
        .bind(&p.key)
        .bind(&p.kind)
        .bind(p.lease.job_id)
        .bind(p.lease.fence)
        .bind(p.now)
        .fetch_optional(&mut *c)
        .await
        .map_err(interpret_error)?;
    Ok(inserted.is_some())
}

pub(crate) async fn others<'e, E>(ex: E, p: EffectClaim) -> StoreResult<Vec<String>>
where
    E: Executor<'e, Database = Postgres>,
{
    sqlx::query_scalar(include_str!("../../queries/effect/others.sql"))
        .bind(p.lease.job_id)
        .bind(&p.kind)
        .bind(&p.key)
        .fetch_all(ex)
        .await
        .map_err(interpret_error)
}

/// The keys one job recorded, oldest first.
pub(crate) async fn list<'e, E>(ex: E, p: EffectList) -> StoreResult<Vec<EffectRecord>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/effect/list.sql"))
        .bind(p.job_id)
        .bind(i64::from(p.limit))
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    rows.iter().map(row::effect).collect()
}
