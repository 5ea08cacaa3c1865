//! Portable SQL values for statements a caller runs inside an idem transaction.
//!
//! A `Transactional` effect writes the caller's own rows in the transaction idem opened
//! for the job; [`SqlValue`] is the small set of types those statements bind and return
//! on every store. A store that cannot represent a value returns [`crate::StoreError::Invalid`].

use crate::Timestamp;

/// A value bound to, or read from, a caller's SQL statement.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    /// SQL NULL.
    Null,
    /// A boolean (SQLite stores 0/1).
    Bool(bool),
    /// A 64-bit integer.
    Int(i64),
    /// A double.
    Real(f64),
    /// Text.
    Text(String),
    /// Bytes.
    Bytes(Vec<u8>),
    /// JSON (PostgreSQL `jsonb`, SQLite text).
    Json(serde_json::Value),
    /// A timestamp (PostgreSQL `timestamptz`, SQLite integer milliseconds).
    Timestamp(Timestamp),
}

impl SqlValue {
    /// The integer inside, if this is an [`SqlValue::Int`].
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            SqlValue::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// The text inside, if this is an [`SqlValue::Text`].
    pub fn as_str(&self) -> Option<&str> {
        match self {
            SqlValue::Text(v) => Some(v),
            _ => None,
        }
    }
}

macro_rules! from_value {
    ($($t:ty => $variant:ident),* $(,)?) => {
        $(impl From<$t> for SqlValue {
            fn from(v: $t) -> Self {
                SqlValue::$variant(v.into())
            }
        })*
    };
}

from_value!(
    bool => Bool, i32 => Int, i64 => Int, f64 => Real, String => Text, &str => Text,
    Vec<u8> => Bytes, serde_json::Value => Json, Timestamp => Timestamp,
);

impl<T: Into<SqlValue>> From<Option<T>> for SqlValue {
    fn from(v: Option<T>) -> Self {
        v.map_or(SqlValue::Null, Into::into)
    }
}
