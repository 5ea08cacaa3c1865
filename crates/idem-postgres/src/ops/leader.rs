//! Leadership (`queries/leader/`): the election, its renewal and the check that fences a
//! leader's writes (see `idem_store::leader`).

use idem_store::{
    LeaderElect, LeaderRenew, LeaderToken, Leadership, StoreError, StoreResult, Timestamp,
};
use sqlx::PgConnection;

use crate::error::interpret_error;
use crate::row;

/// Elects the candidate when nobody leads; answers who leads after the attempt.
pub(crate) async fn elect(c: &mut PgConnection, p: LeaderElect) -> StoreResult<Leadership> {
    let elected = sqlx::query(include_str!("../../queries/leader/elect.sql"))
        .bind(&p.name)
        .bind(&p.holder)
        .bind(p.ttl_ms)
        .bind(p.now)
        .fetch_optional(&mut *c)
        .await
        .map_err(interpret_error)?;
    if let Some(r) = elected {
        return row::leadership(&r);
    }
    let current = sqlx::query(include_str!("../../queries/leader/current.sql"))
        .bind(&p.name)
        .bind(p.now)
        .fetch_optional(&mut *c)
        .await
        .map_err(interpret_error)?;
    match current {
        Some(r) => row::leadership(&r),
        None => Err(StoreError::Database(format!(
            "no leadership row for {:?} after an election",
            p.name
        ))),
    }
}

/// Extends (or ends, with ttl 0) a current leadership.
pub(crate) async fn renew(c: &mut PgConnection, p: LeaderRenew) -> StoreResult<Leadership> {
    let t = &p.token;
    let renewed = sqlx::query(include_str!("../../queries/leader/renew.sql"))
        .bind(&t.name)
        .bind(&t.holder)
        .bind(t.fence)
        .bind(p.ttl_ms)
        .bind(p.now)
        .fetch_optional(&mut *c)
        .await
        .map_err(interpret_error)?;
    match renewed {
        Some(r) => row::leadership(&r),
        None => Err(StoreError::leadership_lost(t)),
    }
}

/// Holds the leadership's row until the transaction ends, if it is current.
pub(crate) async fn check(
    c: &mut PgConnection,
    token: LeaderToken,
    now: Option<Timestamp>,
) -> StoreResult<()> {
    let held = sqlx::query(include_str!("../../queries/leader/check.sql"))
        .bind(&token.name)
        .bind(&token.holder)
        .bind(token.fence)
        .bind(now)
        .fetch_optional(&mut *c)
        .await
        .map_err(interpret_error)?;
    match held {
        Some(_) => Ok(()),
        None => Err(StoreError::leadership_lost(&token)),
    }
}
