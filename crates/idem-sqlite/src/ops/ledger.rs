//! The ledger (`queries/ledger/`): an entry and its account's running total move in one
//! transaction, the entry key deciding duplicates; the check of every total against its
//! entries, and the rebuild of the totals that differ.

use idem_store::{LedgerMismatch, LedgerPost, LedgerPosted, StoreResult};
use rusqlite::{Connection, params};

use super::{existing, rows};
use crate::error::interpret_error;
use crate::row::{self, ts_to_ms};

pub(crate) fn post(c: &Connection, p: &LedgerPost) -> StoreResult<LedgerPosted> {
    let sql = include_str!("../../queries/ledger/post_entry.sql");
    #[cfg(feature = "chaos-break-fence")]
    let sql = crate::chaos::unfenced(sql);
    let now = p.now.map(ts_to_ms);
    let args = params![
        p.entry_key,
        p.account,
        p.amount,
        p.lease.job_id,
        p.lease.fence,
        now
    ];
    if !rows(c, sql, args, |r| {
        r.get::<_, String>(0).map_err(interpret_error)
    })?
    .is_empty()
    {
        let sql = include_str!("../../queries/ledger/move_balance.sql");
        c.prepare_cached(sql)
            .and_then(|mut s| s.execute(params![p.account, p.amount, now]))
            .map_err(interpret_error)?;
        return Ok(LedgerPosted::New);
    }
    let sql = include_str!("../../queries/ledger/get_entry.sql");
    existing(c, sql, &p.entry_key, p.lease, row::ledger_entry).map(LedgerPosted::Duplicate)
}

pub(crate) fn verify(c: &Connection) -> StoreResult<Vec<LedgerMismatch>> {
    rows(
        c,
        include_str!("../../queries/ledger/verify.sql"),
        [],
        row::ledger_mismatch,
    )
}

/// Sets each account's total to the sum of its entries: the row is made if missing
/// (`lock_balance.sql`), then set (`set_balance.sql`), the same two statements as on
/// PostgreSQL (where the first also locks the row before the sum is taken).
pub(crate) fn rebuild(c: &Connection, accounts: &[LedgerMismatch]) -> StoreResult<()> {
    for a in accounts {
        for sql in [
            include_str!("../../queries/ledger/lock_balance.sql"),
            include_str!("../../queries/ledger/set_balance.sql"),
        ] {
            let mut stmt = c.prepare_cached(sql).map_err(interpret_error)?;
            stmt.execute(params![a.account]).map_err(interpret_error)?;
        }
    }
    Ok(())
}
