//! The host side of the WIT `db` interface: every call runs on the message's
//! inbox transaction, through sqlx's extended protocol.

use std::time::Instant;

use super::bindings::inbox::host::{db, types};
use super::bindings::{DbError, Rows, Value};
use super::db_values::{
    bind_all, host_error, keyed_sql, rows_to_values, RESULT_TOO_LARGE, STATEMENT_REFUSED,
};
use super::state::GuestState;
use crate::inbox::Tx;

/// A failure of the database connection itself (not of a statement): the guest
/// cannot act on it, so it traps and the message is retried.
#[derive(Debug, thiserror::Error)]
#[error("database connection failed during a guest statement: {0}")]
pub(crate) struct ConnectionLost(pub sqlx::Error);

impl types::Host for GuestState {}

impl db::Host for GuestState {
    async fn execute(
        &mut self,
        sql: String,
        params: Vec<Value>,
    ) -> wasmtime::Result<Result<u64, DbError>> {
        let sql = match self.admit(&sql, &params) {
            Ok(keyed) => keyed,
            Err(refused) => return Ok(Err(refused)),
        };
        let query = match bind_all(sqlx::query(&sql), params) {
            Ok(q) => q,
            Err(e) => return Ok(Err(e)),
        };
        let tx = transaction(&mut self.tx)?;
        let waiting = Instant::now();
        let done = query.execute(&mut **tx).await;
        self.waited += waiting.elapsed();
        self.settle(done.map(|r| r.rows_affected()))
    }

    async fn query(
        &mut self,
        sql: String,
        params: Vec<Value>,
    ) -> wasmtime::Result<Result<Rows, DbError>> {
        let sql = match self.admit(&sql, &params) {
            Ok(keyed) => keyed,
            Err(refused) => return Ok(Err(refused)),
        };
        let query = match bind_all(sqlx::query(&sql), params) {
            Ok(q) => q,
            Err(e) => return Ok(Err(e)),
        };
        let tx = transaction(&mut self.tx)?;
        let waiting = Instant::now();
        let fetched = fetch_bounded(query, tx).await;
        self.waited += waiting.elapsed();
        match fetched {
            Ok(Ok(rows)) => Ok(rows_to_values(&rows).map(|(columns, rows)| Rows { columns, rows })),
            Ok(Err(too_large)) => Ok(Err(too_large)),
            Err(e) => self.settle(Err(e)),
        }
    }
}

impl GuestState {
    /// Checks a guest statement and returns the SQL to prepare (keyed by its
    /// parameter types). A refusal is remembered so the failure is classified as a
    /// broken rule.
    fn admit(&mut self, sql: &str, params: &[Value]) -> Result<String, DbError> {
        if sql.len() > MAX_STATEMENT_BYTES {
            let refused = host_error(
                STATEMENT_REFUSED,
                format!("a statement of {} bytes is too long (at most {MAX_STATEMENT_BYTES}) [rule: size]", sql.len()),
            );
            self.refused_statement
                .get_or_insert_with(|| refused.clone());
            return Err(refused);
        }
        self.statements
            .check(sql)
            .map(|()| keyed_sql(sql, params))
            .map_err(|v| {
                let refused = host_error(
                    STATEMENT_REFUSED,
                    format!("{} [rule: {}]", v.message, v.rule),
                );
                tracing::warn!(rule = v.rule, "guest statement refused: {}", v.message);
                self.refused_statement
                    .get_or_insert_with(|| refused.clone());
                refused
            })
    }

    /// Turns a statement's result into what the guest sees, remembering the first
    /// statement PostgreSQL rejected (it aborted the transaction).
    fn settle<T>(
        &mut self,
        result: Result<T, sqlx::Error>,
    ) -> wasmtime::Result<Result<T, DbError>> {
        match result {
            Ok(v) => Ok(Ok(v)),
            Err(sqlx::Error::Database(e)) => {
                let error = DbError {
                    code: e.code().map(|c| c.into_owned()).unwrap_or_default(),
                    message: e.message().to_string(),
                };
                self.failed_statement.get_or_insert_with(|| error.clone());
                Ok(Err(error))
            }
            Err(e) => Err(ConnectionLost(e).into()),
        }
    }
}

/// The most a query may return to a guest, so a hostile `SELECT` cannot make the
/// host buffer an unbounded result.
const MAX_ROWS: usize = 100_000;
const MAX_RESULT_BYTES: usize = 16 << 20;

/// Fetches rows until the result ends or passes a bound; past it, the guest gets
/// `IH004` (the rest of the result is discarded by the connection).
async fn fetch_bounded(
    query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    tx: &mut Tx,
) -> Result<Result<Vec<sqlx::postgres::PgRow>, DbError>, sqlx::Error> {
    use futures_util::TryStreamExt;
    use sqlx::Row;
    let mut stream = query.fetch(&mut **tx);
    let (mut rows, mut bytes) = (Vec::new(), 0usize);
    while let Some(row) = stream.try_next().await? {
        bytes += (0..row.len())
            .filter_map(|i| row.try_get_raw(i).ok())
            .map(|v| v.as_bytes().map_or(0, <[u8]>::len))
            .sum::<usize>();
        rows.push(row);
        if rows.len() > MAX_ROWS || bytes > MAX_RESULT_BYTES {
            return Ok(Err(host_error(
                RESULT_TOO_LARGE,
                format!("the result is larger than {MAX_ROWS} rows or {MAX_RESULT_BYTES} bytes: add a LIMIT or aggregate in SQL"),
            )));
        }
    }
    Ok(Ok(rows))
}

/// Longer guest statements are refused before parsing (parse time grows with size).
const MAX_STATEMENT_BYTES: usize = 64 << 10;

fn transaction(tx: &mut Option<Tx>) -> wasmtime::Result<&mut Tx> {
    tx.as_mut()
        .ok_or_else(|| wasmtime::format_err!("the db interface is not available outside a message"))
}
