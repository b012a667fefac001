//! Typed values across the `db` interface: guest parameters to sqlx binds, and
//! PostgreSQL columns back to guest values.

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::types::Oid;
use sqlx::postgres::{PgArgumentBuffer, PgArguments, PgRow, PgTypeInfo};
use sqlx::query::Query;
use sqlx::{Column, Postgres, Row, TypeInfo, ValueRef};

use super::bindings::{DbError, Value};

/// Host error codes (class `IH`), documented in docs/wit.md.
pub(super) const STATEMENT_REFUSED: &str = "IH001";
pub(super) const INVALID_PARAMETER: &str = "IH002";
pub(super) const UNSUPPORTED_COLUMN: &str = "IH003";
pub(super) const RESULT_TOO_LARGE: &str = "IH004";

pub(super) fn host_error(code: &str, message: impl Into<String>) -> DbError {
    DbError {
        code: code.to_string(),
        message: message.into(),
    }
}

/// The SQL actually prepared: the guest's text behind a comment naming the
/// parameter types. sqlx caches prepared statements by SQL text alone, so without
/// it the same text bound first with text and then with an integer would reuse the
/// statement prepared for text.
pub(super) fn keyed_sql(sql: &str, params: &[Value]) -> String {
    let mut keyed = String::with_capacity(sql.len() + 8 + params.len() * 5);
    keyed.push_str("/* ih:");
    for p in params {
        keyed.push_str(type_tag(p));
        keyed.push(',');
    }
    keyed.push_str(" */ ");
    keyed.push_str(sql);
    keyed
}

fn type_tag(value: &Value) -> &'static str {
    match value {
        Value::Null => "u",
        Value::Boolean(_) => "b",
        Value::Int32(_) => "i4",
        Value::Int64(_) => "i8",
        Value::Float64(_) => "f8",
        Value::Text(_) => "t",
        Value::Bytes(_) => "ba",
        Value::Json(_) => "j",
        Value::Timestamp(_) => "ts",
    }
}

pub(super) fn bind_all(
    mut query: Query<'_, Postgres, PgArguments>,
    params: Vec<Value>,
) -> Result<Query<'_, Postgres, PgArguments>, DbError> {
    for (i, p) in params.into_iter().enumerate() {
        query = match p {
            Value::Null => query.bind(UntypedNull),
            Value::Boolean(v) => query.bind(v),
            Value::Int32(v) => query.bind(v),
            Value::Int64(v) => query.bind(v),
            Value::Float64(v) => query.bind(v),
            Value::Text(v) => query.bind(v),
            Value::Bytes(v) => query.bind(v),
            Value::Json(text) => {
                let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                    host_error(
                        INVALID_PARAMETER,
                        format!("parameter ${} is not valid JSON: {e}", i + 1),
                    )
                })?;
                query.bind(sqlx::types::Json(json))
            }
            Value::Timestamp(micros) => {
                let at = DateTime::<Utc>::from_timestamp_micros(micros).ok_or_else(|| {
                    host_error(
                        INVALID_PARAMETER,
                        format!("parameter ${} is out of the timestamp range", i + 1),
                    )
                })?;
                query.bind(at)
            }
        };
    }
    Ok(query)
}

/// Converts every row, column by column, by the column's PostgreSQL type.
pub(super) fn rows_to_values(rows: &[PgRow]) -> Result<(Vec<String>, Vec<Vec<Value>>), DbError> {
    let columns = rows
        .first()
        .map(|r| r.columns().iter().map(|c| c.name().to_string()).collect())
        .unwrap_or_default();
    let values = rows
        .iter()
        .map(|row| (0..row.len()).map(|i| column_value(row, i)).collect())
        .collect::<Result<_, _>>()?;
    Ok((columns, values))
}

fn column_value(row: &PgRow, i: usize) -> Result<Value, DbError> {
    let column = &row.columns()[i];
    let type_name = column.type_info().name().to_string();
    let unreadable = |e: sqlx::Error| {
        host_error(
            UNSUPPORTED_COLUMN,
            format!("column `{}` ({type_name}): {e}", column.name()),
        )
    };
    if row.try_get_raw(i).map_err(unreadable)?.is_null() {
        return Ok(Value::Null);
    }
    Ok(match type_name.as_str() {
        "BOOL" => Value::Boolean(row.try_get(i).map_err(unreadable)?),
        "INT2" => Value::Int32(row.try_get::<i16, _>(i).map_err(unreadable)?.into()),
        "INT4" => Value::Int32(row.try_get(i).map_err(unreadable)?),
        "INT8" => Value::Int64(row.try_get(i).map_err(unreadable)?),
        "FLOAT4" => Value::Float64(row.try_get::<f32, _>(i).map_err(unreadable)?.into()),
        "FLOAT8" => Value::Float64(row.try_get(i).map_err(unreadable)?),
        "TEXT" | "VARCHAR" | "BPCHAR" | "NAME" | "CHAR" => {
            Value::Text(row.try_get(i).map_err(unreadable)?)
        }
        "BYTEA" => Value::Bytes(row.try_get(i).map_err(unreadable)?),
        "JSON" | "JSONB" => {
            let json: serde_json::Value = row.try_get(i).map_err(unreadable)?;
            Value::Json(json.to_string())
        }
        "TIMESTAMPTZ" => Value::Timestamp(
            row.try_get::<DateTime<Utc>, _>(i)
                .map_err(unreadable)?
                .timestamp_micros(),
        ),
        "TIMESTAMP" => Value::Timestamp(
            row.try_get::<NaiveDateTime, _>(i)
                .map_err(unreadable)?
                .and_utc()
                .timestamp_micros(),
        ),
        other => {
            return Err(host_error(
                UNSUPPORTED_COLUMN,
                format!(
                    "column `{}` has type {other}, which the db interface does not carry: \
                     cast it in SQL (for example `{}::text` or `{}::float8`)",
                    column.name(),
                    column.name(),
                    column.name()
                ),
            ))
        }
    })
}

/// A NULL whose type PostgreSQL infers from the statement (parameter type 0), so
/// a null binds to a column of any type.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_sql_with_other_parameter_types_is_another_statement() {
        let text = keyed_sql("SELECT $1", &[Value::Text("a".into())]);
        let int = keyed_sql("SELECT $1", &[Value::Int64(1)]);
        assert_ne!(text, int);
        assert!(text.ends_with("*/ SELECT $1"), "{text}");
        assert_eq!(text, keyed_sql("SELECT $1", &[Value::Text("b".into())]));
    }
}
