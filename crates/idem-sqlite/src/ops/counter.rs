//! Counters (`queries/counter/`): the next number of a counter, belonging to an effect key
//! and committed with the effect; a key keeps the number it got.
//!
//! SQLite dialect: the single writer serialises allocations; without data-modifying CTEs
//! the raise (`bump.sql`) and the assignment (`assign.sql`) are two statements where
//! PostgreSQL's `assign.sql` is one.

use idem_store::{CounterAssigned, CounterNext, StoreError, StoreResult};
use rusqlite::{Connection, Row, params};

use super::rows;
use crate::error::interpret_error;
use crate::row::ts_to_ms;

pub(crate) fn next(c: &Connection, p: &CounterNext) -> StoreResult<CounterAssigned> {
    let one = |r: &Row<'_>| r.get::<_, i64>(0).map_err(interpret_error);
    rows(
        c,
        include_str!("../../queries/counter/lock.sql"),
        [&p.counter],
        one,
    )?;
    let find = include_str!("../../queries/counter/find.sql");
    if let Some(number) = rows(c, find, [&p.key, &p.counter], one)?.pop() {
        return Ok(CounterAssigned { number, new: false });
    }
    let bump = include_str!("../../queries/counter/bump.sql");
    #[cfg(feature = "chaos-break-fence")]
    let bump = crate::chaos::unfenced(bump);
    let args = params![p.counter, p.lease.job_id, p.lease.fence];
    let Some(number) = rows(c, bump, args, one)?.pop() else {
        return Err(StoreError::lease_lost(p.lease));
    };
    let assign = include_str!("../../queries/counter/assign.sql");
    let args = params![
        p.counter,
        p.key,
        number,
        p.lease.job_id,
        p.now.map(ts_to_ms)
    ];
    c.prepare_cached(assign)
        .and_then(|mut s| s.execute(args))
        .map_err(interpret_error)?;
    Ok(CounterAssigned { number, new: true })
}
