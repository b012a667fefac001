//! Typed values across the `db` interface: guest parameters to sqlx binds, and
//! PostgreSQL columns back to guest values.

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

/// A refusal of the host's: waiting cannot change its verdict.
pub(super) fn host_error(code: &str, message: impl Into<String>) -> DbError {
    DbError {
        code: code.to_string(),
        message: message.into(),
        retryable: false,
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

/// The most parameters one statement may carry (PostgreSQL's protocol limit).
pub(super) const MAX_PARAMS: usize = u16::MAX as usize;

/// Bytes a parameter carries: its text or bytes, or 8 for a scalar.
pub(super) fn param_bytes(value: &Value) -> usize {
    match value {
        Value::Text(t) | Value::Json(t) => t.len(),
        Value::Bytes(b) => b.len(),
        _ => 8,
    }
}

pub(super) fn bind_all(
    mut query: Query<'_, Postgres, PgArguments>,
    params: Vec<Value>,
) -> Result<Query<'_, Postgres, PgArguments>, DbError> {
    if params.len() > MAX_PARAMS {
        return Err(host_error(
            INVALID_PARAMETER,
            format!(
                "{} parameters were given, and PostgreSQL takes at most {MAX_PARAMS} per statement: \
                 pass a list as one array or JSON parameter",
                params.len()
            ),
        ));
    }
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
                let at = PgTimestamp::from_unix_micros(micros).ok_or_else(|| {
                    host_error(
                        INVALID_PARAMETER,
                        format!(
                            "parameter ${} ({micros}) is out of the timestamp range: \
                             use {} for infinity and {} for -infinity",
                            i + 1,
                            i64::MAX,
                            i64::MIN
                        ),
                    )
                })?;
                query.bind(at)
            }
        };
    }
    Ok(query)
}

/// The names of a row's columns.
pub(super) fn column_names(row: &PgRow) -> Vec<String> {
    row.columns().iter().map(|c| c.name().to_string()).collect()
}

/// Converts one row, column by column, by the column's PostgreSQL type.
pub(super) fn row_values(row: &PgRow) -> Result<Vec<Value>, DbError> {
    (0..row.len()).map(|i| column_value(row, i)).collect()
}

/// Host memory a converted row holds: every value (NULLs too) plus the row.
pub(super) fn row_footprint(values: &[Value]) -> usize {
    let payload: usize = values
        .iter()
        .map(|v| match v {
            Value::Text(t) | Value::Json(t) => t.len(),
            Value::Bytes(b) => b.len(),
            _ => 0,
        })
        .sum();
    payload + std::mem::size_of_val(values) + std::mem::size_of::<Vec<Value>>()
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
        "TIMESTAMPTZ" | "TIMESTAMP" => {
            let at: PgTimestamp = row.try_get(i).map_err(unreadable)?;
            Value::Timestamp(at.to_unix_micros().ok_or_else(|| {
                host_error(
                    UNSUPPORTED_COLUMN,
                    format!(
                        "column `{}` ({type_name}) holds a time the db interface cannot carry \
                         as microseconds since 1970: cast it in SQL (`{}::text`)",
                        column.name(),
                        column.name()
                    ),
                )
            })?)
        }
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

/// A `timestamptz`/`timestamp` as PostgreSQL sends it: microseconds since
/// 2000-01-01, with `infinity` and `-infinity` as the largest and smallest i64.
/// Decoded by hand because sqlx's chrono decoder panics on those and on times
/// near the end of PostgreSQL's range; a guest can select them.
struct PgTimestamp(i64);

/// Microseconds from 1970-01-01 to 2000-01-01.
const POSTGRES_EPOCH_MICROS: i64 = 946_684_800_000_000;

impl PgTimestamp {
    /// `i64::MAX`/`i64::MIN` are `infinity`/`-infinity` in both directions.
    fn from_unix_micros(micros: i64) -> Option<Self> {
        match micros {
            i64::MAX | i64::MIN => Some(Self(micros)),
            _ => micros.checked_sub(POSTGRES_EPOCH_MICROS).map(Self),
        }
    }

    fn to_unix_micros(&self) -> Option<i64> {
        match self.0 {
            i64::MAX | i64::MIN => Some(self.0),
            micros => micros
                .checked_add(POSTGRES_EPOCH_MICROS)
                .filter(|m| *m != i64::MAX && *m != i64::MIN),
        }
    }
}

impl sqlx::Type<Postgres> for PgTimestamp {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_name("TIMESTAMPTZ")
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        matches!(ty.name(), "TIMESTAMPTZ" | "TIMESTAMP")
    }
}

impl sqlx::Encode<'_, Postgres> for PgTimestamp {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        buf.extend_from_slice(&self.0.to_be_bytes());
        Ok(IsNull::No)
    }
}

impl sqlx::Decode<'_, Postgres> for PgTimestamp {
    fn decode(value: sqlx::postgres::PgValueRef<'_>) -> Result<Self, BoxDynError> {
        let bytes: [u8; 8] = value
            .as_bytes()?
            .try_into()
            .map_err(|_| "a binary timestamp is 8 bytes")?;
        Ok(Self(i64::from_be_bytes(bytes)))
    }
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

    #[test]
    fn timestamps_convert_at_their_extremes_without_overflow() {
        for unix in [i64::MAX, i64::MIN, 0, -1, 1_700_000_000_000_000] {
            let pg = PgTimestamp::from_unix_micros(unix).expect("representable");
            assert_eq!(pg.to_unix_micros(), Some(unix));
        }
        assert!(PgTimestamp::from_unix_micros(i64::MIN + 1).is_none());
        // PostgreSQL's last representable microsecond (year 294276) is past i64 as unix time.
        assert_eq!(PgTimestamp(i64::MAX - 1).to_unix_micros(), None);
    }
}
