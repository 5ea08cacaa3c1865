//! The database clock (`queries/clock/`), in milliseconds since the Unix epoch.

use idem_store::{StoreError, StoreResult};
use rusqlite::Connection;

use super::rows;
use crate::error::interpret_error;

/// The database clock.
pub(crate) fn now(c: &Connection) -> StoreResult<i64> {
    let mut ms = rows(c, include_str!("../../queries/clock/now.sql"), [], |r| {
        r.get(0).map_err(interpret_error)
    })?;
    ms.pop()
        .ok_or_else(|| StoreError::Database("the clock query returned no row".into()))
}
