use std::fmt;

use crate::wit::inbox::host::db as wit;

/// The SQL capability of a handler: statements run inside the message's
/// transaction, which the handler cannot commit or roll back itself.
///
/// A statement that PostgreSQL rejects aborts the transaction: later statements
/// fail too, and the host will not commit even if the handler returns `Ok`.
/// Prefer `ON CONFLICT` and the like over catching errors.
#[derive(Debug)]
pub struct Db {
    _private: (),
}

impl Db {
    pub(crate) fn new() -> Self {
        Self { _private: () }
    }

    /// Runs one statement with `$1`, `$2`, ... bound to `params`; returns the
    /// number of rows it affected.
    pub fn execute(&self, sql: &str, params: &[Value]) -> Result<u64, DbError> {
        wit::execute(sql, params).map_err(DbError::from)
    }

    /// Runs one statement with `$1`, `$2`, ... bound to `params`; returns the rows
    /// it produced.
    pub fn query(&self, sql: &str, params: &[Value]) -> Result<Rows, DbError> {
        let rows = wit::query(sql, params).map_err(DbError::from)?;
        Ok(Rows {
            columns: rows.columns,
            rows: rows.rows,
        })
    }
}

/// A statement parameter or a column value: the WIT contract's own `value`
/// type (docs/wit.md lists how each variant maps to PostgreSQL types).
pub use wit::Value;

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Boolean(_) => "boolean",
            Value::Int32(_) => "int32",
            Value::Int64(_) => "int64",
            Value::Float64(_) => "float64",
            Value::Text(_) => "text",
            Value::Bytes(_) => "bytes",
            Value::Json(_) => "json",
            Value::Timestamp(_) => "timestamp",
        }
    }
}

macro_rules! value_from {
    ($($ty:ty => |$v:ident| $make:expr),* $(,)?) => {
        $(impl From<$ty> for Value {
            fn from($v: $ty) -> Self {
                $make
            }
        })*
    };
}

value_from! {
    bool => |v| Value::Boolean(v),
    i32 => |v| Value::Int32(v),
    i64 => |v| Value::Int64(v),
    f64 => |v| Value::Float64(v),
    &str => |v| Value::Text(v.to_owned()),
    &String => |v| Value::Text(v.clone()),
    String => |v| Value::Text(v),
    Vec<u8> => |v| Value::Bytes(v),
    &[u8] => |v| Value::Bytes(v.to_vec()),
    serde_json::Value => |v| Value::Json(v.to_string()),
}

/// `None` becomes SQL `NULL`.
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// The rows a query produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Rows {
    columns: Vec<String>,
    rows: Vec<Vec<Value>>,
}

impl Rows {
    /// The column names, in order.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// The number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the query produced no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The row at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<Row<'_>> {
        self.rows.get(index).map(|values| Row {
            columns: &self.columns,
            values,
        })
    }

    /// The rows, in order.
    pub fn iter(&self) -> RowsIter<'_> {
        RowsIter {
            columns: &self.columns,
            rows: self.rows.iter(),
        }
    }
}

impl<'a> IntoIterator for &'a Rows {
    type Item = Row<'a>;
    type IntoIter = RowsIter<'a>;

    fn into_iter(self) -> RowsIter<'a> {
        self.iter()
    }
}

/// An iterator over the [`Row`]s of [`Rows`].
#[derive(Debug, Clone)]
pub struct RowsIter<'a> {
    columns: &'a [String],
    rows: std::slice::Iter<'a, Vec<Value>>,
}

impl<'a> Iterator for RowsIter<'a> {
    type Item = Row<'a>;

    fn next(&mut self) -> Option<Row<'a>> {
        let columns = self.columns;
        self.rows.next().map(|values| Row { columns, values })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.rows.size_hint()
    }
}

impl ExactSizeIterator for RowsIter<'_> {}

/// One row of [`Rows`].
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    columns: &'a [String],
    values: &'a [Value],
}

impl Row<'_> {
    /// Reads a column by position (`usize`) or name (`&str`).
    ///
    /// Errors carry SQLSTATE-style codes produced by the SDK, not PostgreSQL:
    /// `42703` for an unknown column, `22004` for `NULL` read as a non-`Option`
    /// type, `42804` for a value of another type.
    pub fn get<T: FromValue>(&self, column: impl RowIndex) -> Result<T, DbError> {
        let index = column
            .index(self.columns)
            .filter(|&i| i < self.values.len())
            .ok_or_else(|| DbError::new("42703", format!("no column {}", column.describe())))?;
        let value = &self.values[index];
        T::from_value(value).ok_or_else(|| match value {
            Value::Null => DbError::new(
                "22004",
                format!(
                    "column {} is null; read it as an Option",
                    self.columns[index]
                ),
            ),
            other => DbError::new(
                "42804",
                format!(
                    "column {} holds {}, which cannot be read as {}",
                    self.columns[index],
                    other.kind(),
                    std::any::type_name::<T>()
                ),
            ),
        })
    }

    /// The raw values, in column order.
    pub fn values(&self) -> &[Value] {
        self.values
    }
}

/// A way to pick a column: its position (`usize`) or its name (`&str`).
pub trait RowIndex {
    /// The position of the column, if it exists.
    fn index(&self, columns: &[String]) -> Option<usize>;
    /// How to name the column in an error message.
    fn describe(&self) -> String;
}

impl RowIndex for usize {
    fn index(&self, _: &[String]) -> Option<usize> {
        Some(*self)
    }
    fn describe(&self) -> String {
        format!("at position {self}")
    }
}

impl RowIndex for &str {
    fn index(&self, columns: &[String]) -> Option<usize> {
        columns.iter().position(|c| c == self)
    }
    fn describe(&self) -> String {
        format!("named {self:?}")
    }
}

/// A Rust type a column value can be read as. Conversions are lossless:
/// an `int32` reads as `i64` or `f64`, an `int64` as `i32` only if it fits.
pub trait FromValue: Sized {
    /// The converted value, or `None` if `value` does not convert.
    fn from_value(value: &Value) -> Option<Self>;
}

impl FromValue for bool {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Boolean(b) => Some(*b),
            _ => None,
        }
    }
}

impl FromValue for i32 {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Int32(i) => Some(*i),
            Value::Int64(i) => i32::try_from(*i).ok(),
            _ => None,
        }
    }
}

/// Also reads a `timestamp` as its microseconds.
impl FromValue for i64 {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Int32(i) => Some(i64::from(*i)),
            Value::Int64(i) | Value::Timestamp(i) => Some(*i),
            _ => None,
        }
    }
}

impl FromValue for f64 {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Float64(f) => Some(*f),
            Value::Int32(i) => Some(f64::from(*i)),
            _ => None,
        }
    }
}

/// Reads `text`, and `json` as its text.
impl FromValue for String {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Text(s) | Value::Json(s) => Some(s.clone()),
            _ => None,
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Bytes(b) => Some(b.clone()),
            _ => None,
        }
    }
}

impl FromValue for serde_json::Value {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Json(s) => serde_json::from_str(s).ok(),
            _ => None,
        }
    }
}

/// SQL `NULL` reads as `None`.
impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Null => Some(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// A failed statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbError {
    /// The SQLSTATE from PostgreSQL, or a code of class `IH` when the host refused
    /// the statement (docs/wit.md).
    pub code: String,
    /// The error message.
    pub message: String,
    /// Whether running the message again can succeed, as the host judged it.
    pub retryable: bool,
}

impl DbError {
    fn new(code: &str, message: String) -> Self {
        Self {
            code: code.to_owned(),
            message,
            retryable: false,
        }
    }

    /// Whether running the message again can succeed (a serialization failure,
    /// deadlock, lock or statement timeout): the host decides, so every guest
    /// language follows the same rule.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }
}

impl From<wit::DbError> for DbError {
    fn from(e: wit::DbError) -> Self {
        Self {
            code: e.code,
            message: e.message,
            retryable: e.retryable,
        }
    }
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for DbError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Rows {
        Rows {
            columns: vec!["id".into(), "note".into(), "doc".into()],
            rows: vec![
                vec![
                    Value::Int32(7),
                    Value::Null,
                    Value::Json(r#"{"a":1}"#.into()),
                ],
                vec![Value::Int64(1 << 40), Value::Text("hi".into()), Value::Null],
            ],
        }
    }

    #[test]
    fn reads_columns_by_position_and_name() {
        let rows = rows();
        assert_eq!(rows.len(), 2);
        let first = rows.get(0).unwrap();
        assert_eq!(first.get::<i64>(0).unwrap(), 7);
        assert_eq!(first.get::<f64>("id").unwrap(), 7.0);
        assert_eq!(first.get::<Option<String>>("note").unwrap(), None);
        assert_eq!(first.get::<serde_json::Value>("doc").unwrap()["a"], 1);
        let ids: Vec<i64> = rows.iter().map(|r| r.get("id").unwrap()).collect();
        assert_eq!(ids, [7, 1 << 40]);
    }

    #[test]
    fn conversion_errors_have_codes() {
        let rows = rows();
        let second = rows.get(1).unwrap();
        assert_eq!(second.get::<i32>("id").unwrap_err().code, "42804");
        assert_eq!(second.get::<String>("doc").unwrap_err().code, "22004");
        assert_eq!(second.get::<String>("nope").unwrap_err().code, "42703");
        assert_eq!(second.get::<String>(9).unwrap_err().code, "42703");
    }

    #[test]
    fn values_from_rust() {
        assert_eq!(Value::from(Some("x")), Value::Text("x".into()));
        assert_eq!(Value::from(None::<i64>), Value::Null);
        assert_eq!(Value::from(&b"ab"[..]), Value::Bytes(b"ab".to_vec()));
        assert_eq!(
            Value::from(serde_json::json!({"k": [1]})),
            Value::Json(r#"{"k":[1]}"#.into())
        );
    }

    #[test]
    fn the_hosts_retryable_verdict_carries_into_the_handler_error() {
        for retryable in [true, false] {
            let e = DbError::from(wit::DbError {
                code: "40001".into(),
                message: String::new(),
                retryable,
            });
            assert_eq!(e.is_retryable(), retryable);
            assert_eq!(crate::HandlerError::from(e).is_retryable(), retryable);
        }
        assert!(!DbError::new("42804", String::new()).is_retryable());
    }
}
