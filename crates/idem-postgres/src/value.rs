//! Binding and reading [`SqlValue`]s for callers' own statements on PostgreSQL.
//!
//! PostgreSQL dialect: JSON binds as `jsonb`, timestamps as `timestamptz`, integers as
//! `bigint` (PostgreSQL casts them on assignment to narrower columns), and SQL NULL as a
//! parameter of unspecified type so the server infers it from its use, as it does for a
//! literal `NULL`. A column read back is decoded by its PostgreSQL type; a type with no
//! [`SqlValue`] counterpart (uuid, date, arrays, …) is refused with
//! [`StoreError::Invalid`] naming the type, so the caller can cast it to text in the SQL.

use idem_store::{SqlValue, StoreError, StoreResult};
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::types::Oid;
use sqlx::postgres::{
    PgArgumentBuffer, PgArguments, PgRow, PgTypeInfo, PgValueFormat, PgValueRef, Postgres,
};
use sqlx::{Executor, Row, TypeInfo, ValueRef};

use crate::error::interpret_error;

type Query = sqlx::query::Query<'static, Postgres, PgArguments>;

/// A NULL parameter declared with type OID 0 ("unspecified"): the server infers its type.
struct UntypedNull;

impl sqlx::Type<Postgres> for UntypedNull {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(Oid(0))
    }
}

impl sqlx::Encode<'_, Postgres> for UntypedNull {
    fn encode_by_ref(&self, _buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        Ok(IsNull::Yes)
    }
}

/// Runs a caller's statement; returns the rows it changed.
pub(crate) async fn execute<'e, E>(ex: E, sql: &str, args: &[SqlValue]) -> StoreResult<u64>
where
    E: Executor<'e, Database = Postgres>,
{
    let q = bind_all(sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())), args)?;
    let done = q.execute(ex).await.map_err(interpret_error)?;
    Ok(done.rows_affected())
}

/// Runs a caller's query; returns every row as values.
pub(crate) async fn query<'e, E>(
    ex: E,
    sql: &str,
    args: &[SqlValue],
) -> StoreResult<Vec<Vec<SqlValue>>>
where
    E: Executor<'e, Database = Postgres>,
{
    let q = bind_all(sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())), args)?;
    let rows = q.fetch_all(ex).await.map_err(interpret_error)?;
    rows.iter().map(decode_row).collect()
}

/// Binds every argument in order.
fn bind_all(mut q: Query, args: &[SqlValue]) -> StoreResult<Query> {
    for a in args {
        q = match a.clone() {
            SqlValue::Null => q.bind(UntypedNull),
            SqlValue::Bool(v) => q.bind(v),
            SqlValue::Int(v) => q.bind(v),
            SqlValue::Real(v) => q.bind(v),
            SqlValue::Text(v) => q.bind(v),
            SqlValue::Bytes(v) => q.bind(v),
            SqlValue::Json(v) => q.bind(sqlx::types::Json(v)),
            SqlValue::Timestamp(v) => q.bind(v),
        };
    }
    Ok(q)
}

/// Reads every column of a row by its PostgreSQL type.
fn decode_row(row: &PgRow) -> StoreResult<Vec<SqlValue>> {
    (0..row.len()).map(|i| decode_col(row, i)).collect()
}

fn decode_col(row: &PgRow, i: usize) -> StoreResult<SqlValue> {
    let raw = row.try_get_raw(i).map_err(interpret_error)?;
    if raw.is_null() {
        return Ok(SqlValue::Null);
    }
    let type_name = raw.type_info().name().to_owned();
    let v = match type_name.as_str() {
        "INT2" => SqlValue::Int(row.try_get::<i16, _>(i).map_err(interpret_error)?.into()),
        "INT4" => SqlValue::Int(row.try_get::<i32, _>(i).map_err(interpret_error)?.into()),
        "INT8" => SqlValue::Int(row.try_get(i).map_err(interpret_error)?),
        "FLOAT4" => SqlValue::Real(row.try_get::<f32, _>(i).map_err(interpret_error)?.into()),
        "FLOAT8" => SqlValue::Real(row.try_get(i).map_err(interpret_error)?),
        "NUMERIC" => SqlValue::Real(numeric_to_f64(raw).map_err(decode_error)?),
        "BOOL" => SqlValue::Bool(row.try_get(i).map_err(interpret_error)?),
        "TEXT" | "VARCHAR" | "NAME" | "BPCHAR" => {
            SqlValue::Text(row.try_get(i).map_err(interpret_error)?)
        }
        "BYTEA" => SqlValue::Bytes(row.try_get(i).map_err(interpret_error)?),
        "JSON" | "JSONB" => SqlValue::Json(row.try_get(i).map_err(interpret_error)?),
        "TIMESTAMPTZ" => SqlValue::Timestamp(row.try_get(i).map_err(interpret_error)?),
        "TIMESTAMP" => {
            let naive: chrono::NaiveDateTime = row.try_get(i).map_err(interpret_error)?;
            SqlValue::Timestamp(naive.and_utc())
        }
        "VOID" => SqlValue::Null,
        other => return Err(unsupported(row, i, other)),
    };
    Ok(v)
}

fn unsupported(row: &PgRow, i: usize, type_name: &str) -> StoreError {
    use sqlx::Column;
    StoreError::Invalid(format!(
        "column {:?} has PostgreSQL type {type_name}, which has no SqlValue counterpart; \
         cast it in the query (e.g. `::text`, `::bigint`, `::float8`)",
        row.column(i).name()
    ))
}

fn decode_error(e: BoxDynError) -> StoreError {
    StoreError::Database(format!("cannot decode a NUMERIC value: {e}"))
}

/// A NUMERIC value as the nearest double, from either wire format.
fn numeric_to_f64(raw: PgValueRef<'_>) -> Result<f64, BoxDynError> {
    match raw.format() {
        PgValueFormat::Text => Ok(raw.as_str()?.trim().parse()?),
        PgValueFormat::Binary => numeric_binary_to_f64(raw.as_bytes()?),
    }
}

/// Decodes NUMERIC's binary form: `ndigits`, `weight`, `sign`, `dscale` (each 16-bit),
/// then `ndigits` base-10000 digits, the first worth 10000^weight. The digits are written
/// out as a decimal with an exponent and parsed, so the result is correctly rounded.
fn numeric_binary_to_f64(bytes: &[u8]) -> Result<f64, BoxDynError> {
    let word = |k: usize| -> Result<u16, BoxDynError> {
        let b = bytes.get(2 * k..2 * k + 2).ok_or("truncated NUMERIC")?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    };
    let (ndigits, weight, sign) = (word(0)? as usize, word(1)? as i16, word(2)?);
    match sign {
        0xC000 => return Ok(f64::NAN),
        0xD000 => return Ok(f64::INFINITY),
        0xF000 => return Ok(f64::NEG_INFINITY),
        _ => {}
    }
    if ndigits == 0 {
        return Ok(0.0);
    }
    let mut text = String::from(if sign == 0x4000 { "-" } else { "" });
    for k in 0..ndigits {
        text.push_str(&format!("{:04}", word(4 + k)?));
    }
    let exponent = 4 * (i32::from(weight) - ndigits as i32 + 1);
    Ok(format!("{text}e{exponent}").parse()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric(ndigits: u16, weight: i16, sign: u16, digits: &[u16]) -> Vec<u8> {
        let mut out = Vec::new();
        for w in [ndigits, weight as u16, sign, 0] {
            out.extend_from_slice(&w.to_be_bytes());
        }
        for d in digits {
            out.extend_from_slice(&d.to_be_bytes());
        }
        out
    }

    #[test]
    fn numeric_binary_decodes() {
        // 12345.678 = 1|2345|6780 with weight 1
        let v = numeric_binary_to_f64(&numeric(3, 1, 0, &[1, 2345, 6780])).unwrap();
        assert_eq!(v, 12345.678);
        // -0.0001 = 1 with weight -1
        let v = numeric_binary_to_f64(&numeric(1, -1, 0x4000, &[1])).unwrap();
        assert_eq!(v, -0.0001);
        assert_eq!(numeric_binary_to_f64(&numeric(0, 0, 0, &[])).unwrap(), 0.0);
        assert!(
            numeric_binary_to_f64(&numeric(0, 0, 0xC000, &[]))
                .unwrap()
                .is_nan()
        );
    }
}
