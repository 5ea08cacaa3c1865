//! The one translation of SQLite driver errors into [`StoreError`].

use idem_store::StoreError;
use rusqlite::ffi;

/// Translates a rusqlite error into the store's vocabulary.
pub fn interpret_error(e: rusqlite::Error) -> StoreError {
    match e {
        rusqlite::Error::SqliteFailure(code, msg) => {
            let msg = msg.unwrap_or_else(|| code.to_string());
            interpret_code(code, msg)
        }
        e @ (rusqlite::Error::InvalidParameterCount(..)
        | rusqlite::Error::InvalidParameterName(_)
        | rusqlite::Error::MultipleStatement
        | rusqlite::Error::NulError(_)
        | rusqlite::Error::ToSqlConversionFailure(_)) => StoreError::Invalid(e.to_string()),
        e @ rusqlite::Error::InvalidPath(_) => StoreError::Config(e.to_string()),
        other => StoreError::Database(other.to_string()),
    }
}

/// Primary result codes decide; the extended code tells the kind of constraint.
fn interpret_code(code: ffi::Error, msg: String) -> StoreError {
    use rusqlite::ErrorCode as C;
    match code.code {
        C::DatabaseBusy | C::DatabaseLocked => StoreError::Busy(msg),
        C::ConstraintViolation => match code.extended_code {
            ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY => {
                StoreError::Duplicate(msg)
            }
            ffi::SQLITE_CONSTRAINT_CHECK | ffi::SQLITE_CONSTRAINT_FOREIGNKEY => {
                StoreError::Invalid(msg)
            }
            ext => StoreError::Database(format!("{msg} (SQLite code {ext})")),
        },
        C::CannotOpen | C::SystemIoFailure | C::DiskFull | C::PermissionDenied => {
            StoreError::Unavailable(msg)
        }
        _ => StoreError::Database(format!("{msg} (SQLite code {})", code.extended_code)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(extended_code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(ffi::Error::new(extended_code), Some("m".into()))
    }

    #[test]
    fn codes_map_to_what_happened() {
        let cases = [
            (ffi::SQLITE_BUSY, "busy"),
            (ffi::SQLITE_BUSY_SNAPSHOT, "busy"),
            (ffi::SQLITE_LOCKED, "busy"),
            (ffi::SQLITE_CONSTRAINT_UNIQUE, "duplicate"),
            (ffi::SQLITE_CONSTRAINT_PRIMARYKEY, "duplicate"),
            (ffi::SQLITE_CONSTRAINT_CHECK, "invalid"),
            (ffi::SQLITE_CONSTRAINT_FOREIGNKEY, "invalid"),
            (ffi::SQLITE_CANTOPEN, "unavailable"),
            (ffi::SQLITE_CORRUPT, "database"),
        ];
        for (code, want) in cases {
            let got = match interpret_error(failure(code)) {
                StoreError::Busy(_) => "busy",
                StoreError::Duplicate(_) => "duplicate",
                StoreError::Invalid(_) => "invalid",
                StoreError::Unavailable(_) => "unavailable",
                StoreError::Database(_) => "database",
                other => panic!("code {code}: {other:?}"),
            };
            assert_eq!(got, want, "code {code}");
        }
    }
}
