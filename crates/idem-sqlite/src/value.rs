//! Binding and reading [`SqlValue`]s for callers' own statements on SQLite.
//!
//! SQLite dialect: JSON binds as text, timestamps as INTEGER milliseconds, booleans as
//! 0/1; a column read back carries SQLite's storage class (INTEGER, REAL, TEXT, BLOB).
//!
//! Placeholders: callers write `$1`, `$2`, … on every store. SQLite reads `$1` as a
//! *named* parameter and numbers parameters in order of first appearance, so each one is
//! bound by the number in its name, never by its position: `$2 … $1` binds correctly, and
//! `?N` (SQLite's numbered form) works too.

use idem_store::{SqlValue, StoreError, StoreResult};
use rusqlite::types::{ToSqlOutput, Value, ValueRef};
use rusqlite::{Connection, Row, Statement, ToSql};

use crate::error::interpret_error;
use crate::row::ts_to_ms;

/// Runs a caller's statement; returns the rows it changed (0 for DDL).
pub(crate) fn execute(c: &Connection, sql: &str, args: &[SqlValue]) -> StoreResult<u64> {
    let before = c.total_changes();
    let mut stmt = c.prepare_cached(sql).map_err(interpret_error)?;
    bind_all(&mut stmt, args)?;
    let mut rows = stmt.raw_query();
    while rows.next().map_err(interpret_error)?.is_some() {}
    Ok(c.total_changes() - before)
}

/// Runs a caller's query; returns every row as values.
pub(crate) fn query(
    c: &Connection,
    sql: &str,
    args: &[SqlValue],
) -> StoreResult<Vec<Vec<SqlValue>>> {
    let mut stmt = c.prepare_cached(sql).map_err(interpret_error)?;
    bind_all(&mut stmt, args)?;
    let width = stmt.column_count();
    let mut rows = stmt.raw_query();
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(interpret_error)? {
        out.push(decode_row(row, width)?);
    }
    Ok(out)
}

/// Binds every placeholder to the argument its number names.
fn bind_all(stmt: &mut Statement<'_>, args: &[SqlValue]) -> StoreResult<()> {
    let count = stmt.parameter_count();
    let mut highest = 0;
    for index in 1..=count {
        let number = placeholder_number(stmt.parameter_name(index), index)?;
        let arg = args.get(number - 1).ok_or_else(|| {
            StoreError::Invalid(format!(
                "placeholder ${number} has no argument ({} given)",
                args.len()
            ))
        })?;
        stmt.raw_bind_parameter(index, Bind(arg))
            .map_err(interpret_error)?;
        highest = highest.max(number);
    }
    if highest != args.len() {
        return Err(StoreError::Invalid(format!(
            "{} arguments for placeholders up to ${highest}",
            args.len()
        )));
    }
    Ok(())
}

/// The argument number of a placeholder: `$N` or `?N` by its name, `?` by its position.
fn placeholder_number(name: Option<&str>, index: usize) -> StoreResult<usize> {
    let Some(name) = name else {
        return Ok(index);
    };
    match name.strip_prefix(['$', '?']).map(str::parse::<usize>) {
        Some(Ok(n)) if n >= 1 => Ok(n),
        _ => Err(StoreError::Invalid(format!(
            "placeholder {name} is not supported; use $1, $2, …"
        ))),
    }
}

/// An [`SqlValue`] as SQLite stores it.
struct Bind<'a>(&'a SqlValue);

impl ToSql for Bind<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self.0 {
            SqlValue::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            SqlValue::Bool(v) => ToSqlOutput::Owned(Value::Integer(i64::from(*v))),
            SqlValue::Int(v) => ToSqlOutput::Owned(Value::Integer(*v)),
            SqlValue::Real(v) => ToSqlOutput::Owned(Value::Real(*v)),
            SqlValue::Text(v) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
            SqlValue::Bytes(v) => ToSqlOutput::Borrowed(ValueRef::Blob(v)),
            SqlValue::Json(v) => ToSqlOutput::Owned(Value::Text(v.to_string())),
            SqlValue::Timestamp(v) => ToSqlOutput::Owned(Value::Integer(ts_to_ms(*v))),
        })
    }
}

/// Reads every column of a row by its storage class.
fn decode_row(row: &Row<'_>, width: usize) -> StoreResult<Vec<SqlValue>> {
    (0..width).map(|i| decode_col(row, i)).collect()
}

fn decode_col(row: &Row<'_>, i: usize) -> StoreResult<SqlValue> {
    Ok(match row.get_ref(i).map_err(interpret_error)? {
        ValueRef::Null => SqlValue::Null,
        ValueRef::Integer(v) => SqlValue::Int(v),
        ValueRef::Real(v) => SqlValue::Real(v),
        ValueRef::Text(v) => SqlValue::Text(String::from_utf8_lossy(v).into_owned()),
        ValueRef::Blob(v) => SqlValue::Bytes(v.to_vec()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> Connection {
        Connection::open_in_memory().expect("in-memory database")
    }

    #[test]
    fn dollar_placeholders_bind_by_number_not_position() {
        let c = conn();
        let args = [SqlValue::Int(1), "two".into()];
        let rows = query(&c, "SELECT $2, $1, $2 || '$1'", &args).expect("query");
        let want = ["two".into(), SqlValue::Int(1), "two$1".into()];
        assert_eq!(rows, vec![want.to_vec()]);
        let rows = query(&c, "SELECT ?2, ?1", &args).expect("numbered form");
        assert_eq!(rows, vec![vec!["two".into(), SqlValue::Int(1)]]);
    }

    #[test]
    fn missing_or_extra_arguments_are_invalid() {
        let c = conn();
        let one = [SqlValue::Int(1)];
        let err = query(&c, "SELECT $1, $2", &one).unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
        let err = query(&c, "SELECT 1", &one).unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
        let err = query(&c, "SELECT :name", &one).unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    }

    #[test]
    fn execute_counts_changed_rows_only() {
        let c = conn();
        assert_eq!(execute(&c, "CREATE TABLE t (v)", &[]).expect("ddl"), 0);
        let sql = "INSERT INTO t (v) VALUES ($1), ($1) RETURNING v";
        assert_eq!(execute(&c, sql, &[SqlValue::Int(5)]).expect("insert"), 2);
        assert_eq!(
            execute(&c, "CREATE INDEX t_v ON t (v)", &[]).expect("ddl"),
            0
        );
    }
}
