//! Leadership (`queries/leader/`): the election, its renewal and the check that fences a
//! leader's writes (see `idem_store::leader`).

use idem_store::{
    LeaderElect, LeaderRenew, LeaderToken, Leadership, StoreError, StoreResult, Timestamp,
};
use rusqlite::{Connection, params};

use super::rows;
use crate::row::{self, ts_to_ms};

/// The clock a leadership statement judges by: the one given, else the database's.
fn now_ms(c: &Connection, now: Option<Timestamp>) -> StoreResult<i64> {
    match now {
        Some(now) => Ok(ts_to_ms(now)),
        None => super::clock::now(c),
    }
}

/// A leadership row as read, judged at `now`.
fn judged(found: Option<row::LeaderRow>, now: i64) -> StoreResult<Option<Leadership>> {
    let Some((name, holder, fence, elected_at, expires_at)) = found else {
        return Ok(None);
    };
    Ok(Some(Leadership {
        name,
        holder,
        fence,
        elected_at,
        expires_at,
        now: row::ms_to_ts(now)?,
    }))
}

/// Elects the candidate when nobody leads; answers who leads after the attempt.
pub(crate) fn elect(c: &Connection, p: &LeaderElect) -> StoreResult<Leadership> {
    let now = now_ms(c, p.now)?;
    let sql = include_str!("../../queries/leader/elect.sql");
    let args = params![p.name, p.holder, p.ttl_ms, now];
    if let Some(elected) = judged(rows(c, sql, args, row::leader)?.pop(), now)? {
        return Ok(elected);
    }
    let sql = include_str!("../../queries/leader/current.sql");
    judged(rows(c, sql, [&p.name], row::leader)?.pop(), now)?.ok_or_else(|| {
        StoreError::Database(format!(
            "no leadership row for {:?} after an election",
            p.name
        ))
    })
}

/// Extends (or ends, with ttl 0) a current leadership.
pub(crate) fn renew(c: &Connection, p: &LeaderRenew) -> StoreResult<Leadership> {
    let now = now_ms(c, p.now)?;
    let t = &p.token;
    let sql = include_str!("../../queries/leader/renew.sql");
    let args = params![t.name, t.holder, t.fence, p.ttl_ms, now];
    judged(rows(c, sql, args, row::leader)?.pop(), now)?
        .ok_or_else(|| StoreError::leadership_lost(t))
}

/// Whether the leadership is current; the writer's lock holds it until the commit.
pub(crate) fn check(
    c: &Connection,
    token: &LeaderToken,
    now: Option<Timestamp>,
) -> StoreResult<()> {
    let now = now_ms(c, now)?;
    let sql = include_str!("../../queries/leader/check.sql");
    let args = params![token.name, token.holder, token.fence, now];
    match rows(c, sql, args, |_| Ok(()))?.is_empty() {
        true => Err(StoreError::leadership_lost(token)),
        false => Ok(()),
    }
}
