//! The ledger (`queries/ledger/`): an entry and its account's running total move in one
//! transaction, the entry key deciding duplicates; the check of every total against its
//! entries, and the rebuild of the totals that differ.

use idem_store::{LedgerMismatch, LedgerPost, LedgerPosted, StoreResult};
use sqlx::{Executor, PgConnection, Postgres};

use super::{INSERT_TRIES, holder, kept_vanishing, still_current};
use crate::error::interpret_error;
use crate::row;

/// Posts the entry and moves the total: `New`, or the entry that holds the key. As for
/// effect keys, an entry that vanished before it could be read back is no reason to
/// refuse a current claim: the insert is tried again, up to [`INSERT_TRIES`] times.
pub(crate) async fn post(c: &mut PgConnection, p: LedgerPost) -> StoreResult<LedgerPosted> {
    for _ in 0..INSERT_TRIES {
        if insert(c, &p).await? {
            move_balance(c, &p).await?;
            return Ok(LedgerPosted::New);
        }
        let get = include_str!("../../queries/ledger/get_entry.sql");
        if let Some(entry) = holder(c, get, &p.entry_key, row::ledger_entry).await? {
            return Ok(LedgerPosted::Duplicate(entry));
        }
        still_current(c, p.lease).await?;
    }
    Err(kept_vanishing("ledger entry", &p.entry_key))
}

/// One fenced insert of the entry; whether it inserted.
async fn insert(c: &mut PgConnection, p: &LedgerPost) -> StoreResult<bool> {
    let sql = include_str!("../../queries/ledger/post_entry.sql");
    #[cfg(feature = "chaos-break-fence")]
    let sql = crate::chaos::unfenced(sql);
    let inserted: Option<String> = sqlx::query_scalar(sql)
        .bind(&p.entry_key)
        .bind(&p.account)
        .bind(p.amount)
        .bind(p.lease.job_id)
        .bind(p.lease.fence)
        .bind(p.now)
        .fetch_optional(&mut *c)
        .await
        .map_err(interpret_error)?;
    Ok(inserted.is_some())
}

async fn move_balance(c: &mut PgConnection, p: &LedgerPost) -> StoreResult<()> {
    sqlx::query(include_str!("../../queries/ledger/move_balance.sql"))
        .bind(&p.account)
        .bind(p.amount)
        .bind(p.now)
        .execute(&mut *c)
        .await
        .map_err(interpret_error)?;
    Ok(())
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

/// Sets each account's total to the sum of its entries. The account's row is locked
/// first (`lock_balance.sql`, creating it if missing) and the sum taken by the next
/// statement, whose snapshot starts after the lock was granted: it counts every post that
/// committed while the rebuild waited, and a post after it waits for this transaction
/// and then moves the rebuilt total.
pub(crate) async fn rebuild(
    c: &mut PgConnection,
    accounts: Vec<LedgerMismatch>,
) -> StoreResult<()> {
    for a in accounts {
        for sql in [
            include_str!("../../queries/ledger/lock_balance.sql"),
            include_str!("../../queries/ledger/set_balance.sql"),
        ] {
            sqlx::query(sql)
                .bind(&a.account)
                .execute(&mut *c)
                .await
                .map_err(interpret_error)?;
        }
    }
    Ok(())
}
