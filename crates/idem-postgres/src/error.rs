//! The one translation of PostgreSQL driver errors into [`StoreError`].
//!
//! Classification is by SQLSTATE (class and code), never by message text, so it does not
//! depend on the server's language. What must stay true: every error that retrying can
//! cure (serialization failures, deadlocks, lock timeouts, lost connections, an exhausted
//! pool, a server that is read-only because it is a standby) maps to a variant for which
//! [`StoreError::is_retryable`] is true, and nothing else does.

use idem_store::StoreError;
use sqlx::error::DatabaseError;

/// Translates a sqlx PostgreSQL error into the store's vocabulary.
pub fn interpret_error(e: sqlx::Error) -> StoreError {
    match e {
        sqlx::Error::Database(db) => interpret_sqlstate(db.as_ref()),
        sqlx::Error::PoolTimedOut => StoreError::Unavailable(pool_timed_out()),
        sqlx::Error::PoolClosed => StoreError::Unavailable("the PostgreSQL store is closed".into()),
        sqlx::Error::Io(io) => StoreError::Unavailable(io.to_string()),
        sqlx::Error::Tls(tls) => StoreError::Unavailable(format!("TLS: {tls}")),
        sqlx::Error::WorkerCrashed => {
            StoreError::Unavailable("the PostgreSQL connection's worker crashed".into())
        }
        sqlx::Error::Configuration(c) => StoreError::Config(c.to_string()),
        sqlx::Error::Encode(enc) => StoreError::Invalid(format!("cannot encode a value: {enc}")),
        other => StoreError::Database(other.to_string()),
    }
}

/// The message of a pool that found no connection within its timeout; it names a
/// refused standby when this process refused one within that time.
fn pool_timed_out() -> String {
    let mut msg = "timed out waiting for a PostgreSQL connection (the server is unreachable or \
                   every pooled connection is busy)"
        .to_owned();
    if crate::primary::refused_within(crate::CONNECT_TIMEOUT * 2) {
        msg = format!(
            "{msg}; this process's last connections reached a server in recovery: {}",
            crate::primary::IN_RECOVERY
        );
    }
    msg
}

/// Classifies a server error by its SQLSTATE.
fn interpret_sqlstate(db: &dyn DatabaseError) -> StoreError {
    let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
    let msg = db.message().to_owned();
    let class = code.get(..2).unwrap_or_default();
    match (class, code.as_str()) {
        (_, "23505") => StoreError::Duplicate(msg),
        // serialization_failure, deadlock_detected, lock_not_available,
        // too_many_connections
        (_, "40001" | "40P01" | "55P03" | "53300") => StoreError::Busy(msg),
        // a transaction's BEGIN behind a pooler that reached a server in recovery
        (_, "22P02") if msg.contains(crate::pooler::IN_RECOVERY_MARK) => {
            StoreError::Unavailable(format!(
                "{}: the pooler leads to a standby; point it at the primary",
                crate::pooler::IN_RECOVERY_MARK
            ))
        }
        // check_violation, not_null_violation, and data exceptions (bad input syntax,
        // out-of-range values, invalid JSON, …)
        (_, "23514" | "23502") | ("22", _) => StoreError::Invalid(msg),
        // connection exceptions; admin/crash/cannot-connect-now shutdowns
        ("08", _) | (_, "57P01" | "57P02" | "57P03") => StoreError::Unavailable(msg),
        // read_only_sql_transaction: a write reached a standby (through a pooler whose
        // server connection moved, say; pooled connections to one are refused at
        // connect, primary.rs). Unavailable until the address reaches a primary again.
        (_, "25006") => StoreError::Unavailable(format!(
            "{msg} (SQLSTATE 25006): the server is read-only, a standby in recovery or a \
             session with default_transaction_read_only; idem writes on a primary only"
        )),
        // in_failed_sql_transaction: an earlier statement failed; PgTx::commit asks this
        // before COMMIT, which PostgreSQL would answer with a rollback, not an error
        (_, "25P02") => StoreError::Database(format!(
            "{msg} (SQLSTATE 25P02): a statement of this transaction failed earlier, so \
             PostgreSQL aborted it and nothing of it is committed; run it again without the \
             failing statement, or with that statement inside a savepoint"
        )),
        // idle_in_transaction_session_timeout: the session is gone, nothing committed;
        // like any lost connection, the work can be done again
        (_, "25P03") => StoreError::Unavailable(format!(
            "{msg} (SQLSTATE 25P03): the transaction sat idle longer than its idle timeout \
             (PgOptions::idle_in_transaction_timeout, or a worker's lease), so PostgreSQL \
             ended its session; nothing of it was committed"
        )),
        // invalid authorization, unknown database: the settings are wrong
        ("28", _) | (_, "3D000") => StoreError::Config(format!("{msg} (SQLSTATE {code})")),
        _ => StoreError::Database(format!("{msg} (SQLSTATE {code})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_and_pool_errors_are_unavailable() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(matches!(
            interpret_error(sqlx::Error::Io(io)),
            StoreError::Unavailable(_)
        ));
        assert!(interpret_error(sqlx::Error::PoolTimedOut).is_retryable());
        assert!(interpret_error(sqlx::Error::PoolClosed).is_retryable());
    }
}
