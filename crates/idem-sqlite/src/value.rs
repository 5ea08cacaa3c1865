//! Binding and reading [`SqlValue`]s for callers' own statements on SQLite.
//!
//! SQLite dialect: JSON binds as text, timestamps as INTEGER milliseconds, booleans as
//! 0/1; a column read back carries SQLite's storage class (INTEGER, REAL, TEXT, BLOB).

use idem_store::{SqlValue, StoreResult};
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{Row, Sqlite, TypeInfo, ValueRef};

use crate::error::interpret_error;
use crate::row::ts_to_ms;

type Query = sqlx::query::Query<'static, Sqlite, SqliteArguments>;

/// Binds every argument in order.
pub(crate) fn bind_all(mut q: Query, args: &[SqlValue]) -> StoreResult<Query> {
    for a in args {
        q = match a.clone() {
            SqlValue::Null => q.bind(None::<i64>),
            SqlValue::Bool(v) => q.bind(v),
            SqlValue::Int(v) => q.bind(v),
            SqlValue::Real(v) => q.bind(v),
            SqlValue::Text(v) => q.bind(v),
            SqlValue::Bytes(v) => q.bind(v),
            SqlValue::Json(v) => q.bind(v.to_string()),
            SqlValue::Timestamp(v) => q.bind(ts_to_ms(v)),
        };
    }
    Ok(q)
}

/// Reads every column of a row by its storage class.
pub(crate) fn decode_row(row: &SqliteRow) -> StoreResult<Vec<SqlValue>> {
    (0..row.len()).map(|i| decode_col(row, i)).collect()
}

fn decode_col(row: &SqliteRow, i: usize) -> StoreResult<SqlValue> {
    let raw = row.try_get_raw(i).map_err(interpret_error)?;
    if raw.is_null() {
        return Ok(SqlValue::Null);
    }
    let class = raw.type_info().name().to_owned();
    let v = match class.as_str() {
        "INTEGER" | "BOOLEAN" => SqlValue::Int(row.try_get(i).map_err(interpret_error)?),
        "REAL" => SqlValue::Real(row.try_get(i).map_err(interpret_error)?),
        "BLOB" => SqlValue::Bytes(row.try_get(i).map_err(interpret_error)?),
        _ => SqlValue::Text(row.try_get(i).map_err(interpret_error)?),
    };
    Ok(v)
}
