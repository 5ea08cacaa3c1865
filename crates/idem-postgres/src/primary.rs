//! idem works on a primary only: every pooled connection is checked once, when it is
//! opened, and one that reached a server in recovery (a standby, or a replica whose
//! promotion has not finished) is refused before any statement of idem's runs on it.
//!
//! Why: leases, fences, effect keys and intents are decided by reading them and writing
//! in the same transaction on the one server that orders every claim. A standby answers
//! reads from a past moment (asynchronous replication lags; even a synchronous standby
//! applies WAL after the primary's commit returned), so a lease or a fence read there may
//! already be stale. Writes on a standby fail anyway (SQLSTATE 25006, which
//! `error.rs` reports as unavailable); the check here also keeps reads off it.
//!
//! What must stay true: no connection that answered `pg_is_in_recovery() = true` is ever
//! handed out by a pool. A server cannot leave the primary role without restarting (a
//! demoted primary is rewound and restarted as a standby), which ends its connections, so
//! checking each connection once, at connect, is enough, except behind a pooler, whose
//! connections outlive the server's: there each transaction's `BEGIN` checks too
//! (`pooler::begin_statement`). The pool keeps trying to
//! connect, with its own exponential backoff (10 ms doubling, at most a fifth of
//! [`crate::CONNECT_TIMEOUT`]), so a worker whose address moves to a standby that is
//! then promoted reconnects within one backoff step of the promotion.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Instant;

use sqlx::PgConnection;
use sqlx::pool::PoolConnectionMetadata;

/// When this process last refused a connection to a server in recovery; the message of a
/// pool that timed out then says so (`error.rs`).
static LAST_REFUSAL: Mutex<Option<Instant>> = Mutex::new(None);

/// What a refused connection reports (logged by the pool at each refusal).
pub(crate) const IN_RECOVERY: &str = "the PostgreSQL server is in recovery (a standby, or a \
     replica not yet promoted); idem reads and writes leases and fences on the primary only, \
     so it refuses this connection and keeps trying until the address reaches a primary";

/// The pools' `after_connect` hook: refuses a connection to a server in recovery.
pub(crate) fn refuse_standby(
    conn: &mut PgConnection,
    _: PoolConnectionMetadata,
) -> Pin<Box<dyn Future<Output = Result<(), sqlx::Error>> + Send + '_>> {
    Box::pin(async move {
        // The simple protocol: parsed and run in one round trip. The extended protocol's
        // two (parse, then bind and run) outside a transaction may reach two server
        // sessions behind a transaction pooler, and the second could run another
        // client's unnamed statement.
        let row = sqlx::raw_sql(include_str!("../queries/session/in_recovery.sql"))
            .fetch_one(conn)
            .await?;
        let in_recovery: bool = sqlx::Row::try_get(&row, 0)?;
        if !in_recovery {
            return Ok(());
        }
        *LAST_REFUSAL.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        tracing::warn!("connection refused: {IN_RECOVERY}");
        Err(sqlx::Error::Io(std::io::Error::other(IN_RECOVERY)))
    })
}

/// Whether this process refused a connection to a server in recovery within `within`.
pub(crate) fn refused_within(within: std::time::Duration) -> bool {
    let last = *LAST_REFUSAL.lock().unwrap_or_else(|e| e.into_inner());
    last.is_some_and(|at| at.elapsed() <= within)
}
