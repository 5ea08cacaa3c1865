//! Purges (`queries/purge/`): one bounded batch of dedup records (enqueue keys, effect
//! keys, intents, Idempotency-Key records), finished jobs or finished batches older than a time, oldest first, and the count of what is left to purge. A purged job takes
//! its attempt history and enqueue key with it.

use idem_store::{Purge, PurgeTarget, StoreResult};
use rusqlite::{Connection, params};

use super::job::delete_job_records;
use super::rows;
use crate::error::interpret_error;
use crate::row::ts_to_ms;

/// The job states a purge of `target` deletes, as the JSON list the statements take.
fn purged_states(target: PurgeTarget) -> &'static str {
    match target {
        PurgeTarget::DeadJobs => r#"["dead"]"#,
        _ => r#"["completed","cancelled"]"#,
    }
}

pub(crate) fn delete(c: &Connection, p: &Purge) -> StoreResult<u64> {
    let before = ts_to_ms(p.before);
    let limit = i64::from(p.limit);
    let keys = |sql: &str| -> StoreResult<u64> {
        let mut stmt = c.prepare_cached(sql).map_err(interpret_error)?;
        let n = stmt
            .execute(params![before, limit])
            .map_err(interpret_error)?;
        Ok(n as u64)
    };
    match p.target {
        PurgeTarget::EnqueueKeys => keys(include_str!("../../queries/purge/enqueue_keys.sql")),
        PurgeTarget::EffectKeys => keys(include_str!("../../queries/purge/effect_keys.sql")),
        PurgeTarget::Intents => keys(include_str!("../../queries/purge/intents.sql")),
        PurgeTarget::HttpKeys => keys(include_str!("../../queries/purge/http_keys.sql")),
        PurgeTarget::Batches => {
            let sql = include_str!("../../queries/purge/batches.sql");
            let gone: Vec<i64> = rows(c, sql, params![before, limit], |r| {
                r.get(0).map_err(interpret_error)
            })?;
            if !gone.is_empty() {
                let sql = include_str!("../../queries/purge/batch_shards.sql");
                let mut stmt = c.prepare_cached(sql).map_err(interpret_error)?;
                stmt.execute([super::json_list(&gone)?])
                    .map_err(interpret_error)?;
            }
            Ok(gone.len() as u64)
        }
        PurgeTarget::FinishedJobs | PurgeTarget::DeadJobs => {
            let sql = include_str!("../../queries/purge/jobs.sql");
            let args = params![before, limit, purged_states(p.target)];
            let gone: Vec<i64> = rows(c, sql, args, |r| r.get(0).map_err(interpret_error))?;
            delete_job_records(c, &gone)?;
            Ok(gone.len() as u64)
        }
    }
}

pub(crate) fn count(c: &Connection, target: PurgeTarget, before: i64) -> StoreResult<u64> {
    let count = |sql: &str, args: &[&dyn rusqlite::ToSql]| -> StoreResult<u64> {
        let n: Vec<i64> = rows(c, sql, args, |r| r.get(0).map_err(interpret_error))?;
        Ok(n.first().copied().unwrap_or(0) as u64)
    };
    match target {
        PurgeTarget::EnqueueKeys => count(
            include_str!("../../queries/purge/count_enqueue_keys.sql"),
            &[&before],
        ),
        PurgeTarget::EffectKeys => count(
            include_str!("../../queries/purge/count_effect_keys.sql"),
            &[&before],
        ),
        PurgeTarget::Intents => count(
            include_str!("../../queries/purge/count_intents.sql"),
            &[&before],
        ),
        PurgeTarget::HttpKeys => count(
            include_str!("../../queries/purge/count_http_keys.sql"),
            &[&before],
        ),
        PurgeTarget::Batches => count(
            include_str!("../../queries/purge/count_batches.sql"),
            &[&before],
        ),
        PurgeTarget::FinishedJobs | PurgeTarget::DeadJobs => count(
            include_str!("../../queries/purge/count_jobs.sql"),
            &[&before, &purged_states(target)],
        ),
    }
}
