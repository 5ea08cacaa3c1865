//! Effect keys (`queries/effect/`): the claim that records a key in the effect's own
//! transaction (the table's unique key decides, guarded by the claim's fence), and the
//! keys of other kinds a job has recorded.

use idem_store::{EffectClaim, EffectClaimed, StoreResult};
use sqlx::{Executor, PgConnection, Postgres};

use super::existing;
use crate::error::interpret_error;
use crate::row;

pub(crate) async fn claim(c: &mut PgConnection, p: EffectClaim) -> StoreResult<EffectClaimed> {
    let inserted: Option<String> =
        sqlx::query_scalar(include_str!("../../queries/effect/claim.sql"))
            .bind(&p.key)
            .bind(&p.kind)
            .bind(p.lease.job_id)
            .bind(p.lease.fence)
            .bind(p.now)
            .fetch_optional(&mut *c)
            .await
            .map_err(interpret_error)?;
    if inserted.is_some() {
        return Ok(EffectClaimed::New);
    }
    let get = include_str!("../../queries/effect/get.sql");
    let record = existing(c, get, &p.key, p.lease, row::effect).await?;
    Ok(EffectClaimed::Done(record))
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
