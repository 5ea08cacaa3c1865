//! The one translation of SQLite driver errors into [`StoreError`].

use idem_store::StoreError;

/// Translates a sqlx SQLite error into the store's vocabulary.
pub fn interpret_error(e: sqlx::Error) -> StoreError {
    match e {
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            let msg = db.message().to_owned();
            // Primary result codes: 5 SQLITE_BUSY, 6 SQLITE_LOCKED (extended codes keep
            // the primary code in their low byte).
            let primary = code.parse::<i32>().map(|c| c & 0xff).unwrap_or(-1);
            if db.is_unique_violation() {
                StoreError::Duplicate(msg)
            } else if primary == 5 || primary == 6 {
                StoreError::Busy(msg)
            } else if db.is_check_violation() || db.is_foreign_key_violation() {
                StoreError::Invalid(msg)
            } else {
                StoreError::Database(format!("{msg} (SQLite code {code})"))
            }
        }
        sqlx::Error::PoolTimedOut => StoreError::Busy(
            "timed out waiting for the SQLite write connection (another write holds it)".into(),
        ),
        sqlx::Error::PoolClosed => StoreError::Unavailable("the SQLite store is closed".into()),
        sqlx::Error::Io(io) => StoreError::Unavailable(io.to_string()),
        sqlx::Error::Configuration(c) => StoreError::Config(c.to_string()),
        other => StoreError::Database(other.to_string()),
    }
}
