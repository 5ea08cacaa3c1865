//! Effect keys (`queries/effect/`): the claim that records a key in the effect's own
//! transaction (the table's unique key decides, guarded by the claim's fence), and the
//! keys of other kinds a job has recorded, and every key of a job.

use idem_store::{EffectClaim, EffectClaimed, EffectList, EffectRecord, StoreResult};
use rusqlite::{Connection, params};

use super::{existing, rows};
use crate::error::interpret_error;
use crate::row::{self, ts_to_ms};

pub(crate) fn claim(c: &Connection, p: &EffectClaim) -> StoreResult<EffectClaimed> {
    let sql = include_str!("../../queries/effect/claim.sql");
    #[cfg(feature = "chaos-break-fence")]
    let sql = crate::chaos::unfenced(sql);
    let args = params![
        p.key,
        p.kind,
        p.lease.job_id,
        p.lease.fence,
        p.now.map(ts_to_ms)
    ];
    if !rows(c, sql, args, |r| {
        r.get::<_, String>(0).map_err(interpret_error)
    })?
    .is_empty()
    {
        return Ok(EffectClaimed::New);
    }
    let sql = include_str!("../../queries/effect/get.sql");
    existing(c, sql, &p.key, p.lease, row::effect).map(EffectClaimed::Done)
}

pub(crate) fn others(c: &Connection, p: &EffectClaim) -> StoreResult<Vec<String>> {
    let sql = include_str!("../../queries/effect/others.sql");
    let args = params![p.lease.job_id, p.kind, p.key];
    rows(c, sql, args, |r| {
        r.get::<_, String>(0).map_err(interpret_error)
    })
}

/// The keys one job recorded, oldest first.
pub(crate) fn list(c: &Connection, p: &EffectList) -> StoreResult<Vec<EffectRecord>> {
    let sql = include_str!("../../queries/effect/list.sql");
    rows(c, sql, params![p.job_id, p.limit], row::effect)
}
