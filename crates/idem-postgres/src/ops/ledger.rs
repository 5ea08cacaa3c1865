//! The ledger (`queries/ledger/`): an entry and its account's running total move in one
//! transaction, the entry key deciding duplicates; the check of every total against its
//! entries, and the rebuild of the totals that differ.

use idem_store::{LedgerMismatch, LedgerPost, LedgerPosted, StoreResult};
use sqlx::{Executor, PgConnection, Postgres};

use super::existing;
use crate::error::interpret_error;
use crate::row;

pub(crate) async fn post(c: &mut PgConnection, p: LedgerPost) -> StoreResult<LedgerPosted> {
    let inserted: Option<String> =
        sqlx::query_scalar(include_str!("../../queries/ledger/post_entry.sql"))
            .bind(&p.entry_key)
            .bind(&p.account)
            .bind(p.amount)
            .bind(p.lease.job_id)
            .bind(p.lease.fence)
            .bind(p.now)
            .fetch_optional(&mut *c)
            .await
            .map_err(interpret_error)?;
    if inserted.is_some() {
        sqlx::query(include_str!("../../queries/ledger/move_balance.sql"))
            .bind(&p.account)
            .bind(p.amount)
            .bind(p.now)
            .execute(&mut *c)
            .await
            .map_err(interpret_error)?;
        return Ok(LedgerPosted::New);
    }
    let get = include_str!("../../queries/ledger/get_entry.sql");
    let entry = existing(c, get, &p.entry_key, p.lease, row::ledger_entry).await?;
    Ok(LedgerPosted::Duplicate(entry))
}

pub(crate) async fn verify<'e, E>(ex: E) -> StoreResult<Vec<LedgerMismatch>>
where
    E: Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(include_str!("../../queries/ledger/verify.sql"))
        .fetch_all(ex)
        .await
        .map_err(interpret_error)?;
    rows.iter().map(row::ledger_mismatch).collect()
}

pub(crate) async fn rebuild(
    c: &mut PgConnection,
    accounts: Vec<LedgerMismatch>,
) -> StoreResult<()> {
    for a in accounts {
        sqlx::query(include_str!("../../queries/ledger/set_balance.sql"))
            .bind(&a.account)
            .execute(&mut *c)
            .await
            .map_err(interpret_error)?;
    }
    Ok(())
}
