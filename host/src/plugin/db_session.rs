//! The host side of the WIT `db` interface (and of `outbox`, which shares its
//! session): every `db` call runs on the message's inbox transaction, through
//! sqlx's extended protocol.

use std::future::Future;
use std::sync::Arc;

use super::bindings::inbox::host::outbox::{self, Message, PublishError};
use super::bindings::inbox::host::requests::{self, Request, RequestError};
use super::bindings::inbox::host::{db, types};
use super::bindings::{DbError, Rows, Value};
use super::clock::GuestClock;
use super::db_values::{
    bind_all, column_names, host_error, keyed_sql, param_bytes, row_footprint, row_values,
    INVALID_PARAMETER, RESULT_TOO_LARGE, STATEMENT_REFUSED,
};
use super::handed_over::Refusals;
use super::outbox::OutboxSession;
use super::requests::RequestSession;
use super::sql_checks::CheckedStatements;
use crate::inbox::{lost_connection, retryable_sqlstate, Tx};

/// One message's `db` session: its transaction, and what its statements did.
pub(crate) struct DbSession {
    /// `None` only for an offline check, where `db` calls trap.
    pub tx: Option<Tx>,
    /// The first statement PostgreSQL rejected (it aborted the transaction), or
    /// whose result the host refused after it ran: the transaction must not commit.
    pub failed_statement: Option<DbError>,
    /// The first statement the host refused (it was not sent): a failure after it
    /// is classified `db-rule`.
    pub refused_statement: Option<DbError>,
    /// Statements the host refused for this message (only the first few are logged).
    pub refusals: Refusals,
    statements: Arc<CheckedStatements>,
    /// Parameter bytes allowed per statement, and sent so far by this message.
    max_param_bytes: usize,
    param_bytes: usize,
    clock: GuestClock,
    /// What the guest published (the `outbox` interface shares this session).
    pub outbox: OutboxSession,
    /// What the guest asked to send after commit (`requests` shares it too).
    pub requests: RequestSession,
}

impl DbSession {
    pub fn new(
        tx: Option<Tx>,
        statements: Arc<CheckedStatements>,
        max_param_bytes: usize,
        clock: GuestClock,
        outbox: OutboxSession,
        requests: RequestSession,
    ) -> Self {
        Self {
            tx,
            failed_statement: None,
            refused_statement: None,
            refusals: Refusals::default(),
            statements,
            max_param_bytes,
            param_bytes: 0,
            clock,
            outbox,
            requests,
        }
    }

    /// Binds the session to the next message's transaction, forgetting what the
    /// previous message's statements did (a reused instance).
    pub fn next_message(&mut self, tx: Tx) {
        self.tx = Some(tx);
        self.failed_statement = None;
        self.refused_statement = None;
        self.refusals.reset();
        self.param_bytes = 0;
        self.outbox.next_message();
    }
}

/// A failure of the database connection itself (not of a statement): the guest
/// cannot act on it, so it traps and the message is retried.
#[derive(Debug, thiserror::Error)]
#[error("database connection failed during a guest statement: {0}")]
pub(crate) struct ConnectionLost(pub sqlx::Error);

impl types::Host for DbSession {}

impl outbox::Host for DbSession {
    async fn publish(&mut self, message: Message) -> wasmtime::Result<Result<(), PublishError>> {
        Ok(self.outbox.publish(message))
    }
}

impl requests::Host for DbSession {
    async fn send_after_commit(
        &mut self,
        request: Request,
    ) -> wasmtime::Result<Result<String, RequestError>> {
        Ok(self.requests.request(request))
    }
}

impl db::Host for DbSession {
    async fn execute(
        &mut self,
        sql: String,
        params: Vec<Value>,
    ) -> wasmtime::Result<Result<u64, DbError>> {
        self.run::<Count>(&sql, params).await
    }

    async fn query(
        &mut self,
        sql: String,
        params: Vec<Value>,
    ) -> wasmtime::Result<Result<Rows, DbError>> {
        self.run::<AllRows>(&sql, params).await
    }
}

type GuestQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// What a call reads back from its statement: `execute` a count, `query` the
/// rows (or the host's refusal of them).
trait Fetch {
    type Out;
    /// Whether the guest reads the statement's rows (they are then bounded
    /// per row on the server too: [`bounded_rows`]).
    const READS_ROWS: bool;
    fn fetch<'q>(
        query: GuestQuery<'q>,
        tx: &'q mut Tx,
    ) -> impl Future<Output = Result<Result<Self::Out, DbError>, sqlx::Error>> + Send + 'q;
}

struct Count;
struct AllRows;

impl Fetch for Count {
    type Out = u64;
    const READS_ROWS: bool = false;
    async fn fetch<'q>(
        query: GuestQuery<'q>,
        tx: &'q mut Tx,
    ) -> Result<Result<u64, DbError>, sqlx::Error> {
        Ok(Ok(query.execute(&mut **tx).await?.rows_affected()))
    }
}

impl Fetch for AllRows {
    type Out = Rows;
    const READS_ROWS: bool = true;
    fn fetch<'q>(
        query: GuestQuery<'q>,
        tx: &'q mut Tx,
    ) -> impl Future<Output = Result<Result<Rows, DbError>, sqlx::Error>> + Send + 'q {
        fetch_bounded(query, tx)
    }
}

impl DbSession {
    /// The one path of every statement: checked and bounded, bound, run on the
    /// message's transaction (the wait not counted against the guest's
    /// deadline), and its outcome turned into what the guest sees.
    async fn run<F: Fetch>(
        &mut self,
        sql: &str,
        params: Vec<Value>,
    ) -> wasmtime::Result<Result<F::Out, DbError>> {
        let keyed = match self.admit(sql, &params, F::READS_ROWS) {
            Ok(keyed) => keyed,
            Err(refused) => return Ok(Err(refused)),
        };
        let query = match bind_all(guest_statement(&keyed), params) {
            Ok(q) => q,
            Err(e) => return Ok(Err(e)),
        };
        let tx = transaction(&mut self.tx)?;
        self.clock.db_wait_begins();
        let done = F::fetch(query, tx).await;
        self.clock.db_wait_ends();
        match done {
            Ok(Ok(answer)) => Ok(Ok(answer)),
            // The statement ran (and may have written) before its result was
            // refused: like a failed statement, the transaction will not commit.
            Ok(Err(refused)) => {
                self.failed_statement.get_or_insert_with(|| refused.clone());
                Ok(Err(refused))
            }
            Err(e) => self.settle(e),
        }
    }

    /// Checks a guest statement and returns the SQL to prepare (keyed by its
    /// parameter types). A refusal is remembered so the failure is classified as a
    /// broken rule.
    fn admit(&mut self, sql: &str, params: &[Value], reads_rows: bool) -> Result<String, DbError> {
        self.admit_params(params)?;
        if sql.len() > MAX_STATEMENT_BYTES {
            let refused = host_error(
                STATEMENT_REFUSED,
                format!("a statement of {} bytes is too long (at most {MAX_STATEMENT_BYTES}) [rule: size]", sql.len()),
            );
            self.refusals
                .note("statement", STATEMENT_REFUSED, &refused.message);
            self.refused_statement
                .get_or_insert_with(|| refused.clone());
            return Err(refused);
        }
        self.statements
            .check(sql)
            .map(|admitted| match reads_rows && admitted.rows_in_cte {
                true => keyed_sql(&bounded_rows(&sql[admitted.start..admitted.end]), params),
                false => keyed_sql(sql, params),
            })
            .map_err(|v| {
                let refused = host_error(
                    STATEMENT_REFUSED,
                    format!("{} [rule: {}]", v.message, v.rule),
                );
                self.refusals
                    .note("statement", STATEMENT_REFUSED, &refused.message);
                self.refused_statement
                    .get_or_insert_with(|| refused.clone());
                refused
            })
    }

    /// Parameters are bounded per statement and per message before anything
    /// is sent (IH002).
    fn admit_params(&mut self, params: &[Value]) -> Result<(), DbError> {
        let bytes: usize = params.iter().map(param_bytes).sum();
        let per_statement = self.max_param_bytes;
        if bytes > per_statement {
            return Err(host_error(
                INVALID_PARAMETER,
                format!("the parameters hold {bytes} bytes, more than --max-param-bytes ({per_statement}) per statement"),
            ));
        }
        let per_message = per_statement.saturating_mul(PARAM_BYTES_PER_MESSAGE_FACTOR);
        self.param_bytes += bytes;
        if self.param_bytes > per_message {
            return Err(host_error(
                INVALID_PARAMETER,
                format!(
                    "this message's statements have sent {} bytes of parameters, more than \
                     {PARAM_BYTES_PER_MESSAGE_FACTOR} x --max-param-bytes ({per_message})",
                    self.param_bytes
                ),
            ));
        }
        Ok(())
    }

    /// Turns a failed statement into what the guest sees (remembering the first,
    /// which aborted the transaction), or a trap when the connection is gone.
    fn settle<T>(&mut self, error: sqlx::Error) -> wasmtime::Result<Result<T, DbError>> {
        match error {
            sqlx::Error::Database(e) => {
                let code = e.code().map(|c| c.into_owned()).unwrap_or_default();
                let error = DbError {
                    retryable: retryable_sqlstate(&code),
                    code,
                    message: crate::inbox::storable_text(
                        e.message(),
                        crate::inbox::MAX_FAILURE_TEXT,
                    ),
                };
                self.failed_statement.get_or_insert_with(|| error.clone());
                Ok(Err(error))
            }
            e if lost_connection(&e) => Err(ConnectionLost(e).into()),
            // The statement and its parameters did not fit the protocol or their
            // types (the guest's doing, not the network's): the statement failed.
            e => {
                let error = host_error(
                    INVALID_PARAMETER,
                    format!("the statement could not be run with these parameters: {e}"),
                );
                self.failed_statement.get_or_insert_with(|| error.clone());
                Ok(Err(error))
            }
        }
    }
}

/// The most a query may return to a guest, so a hostile `SELECT` cannot make the
/// host buffer an unbounded result.
const MAX_ROWS: usize = 100_000;
const MAX_RESULT_BYTES: usize = 16 << 20;

/// A message's statements may send this many times `--max-param-bytes` in all.
pub(super) const PARAM_BYTES_PER_MESSAGE_FACTOR: usize = 16;

/// The guest's statement read through a CTE whose rows PostgreSQL measures
/// before sending: a row over [`MAX_RESULT_BYTES`] fails the statement on the
/// server (a cast of the marker text to `int`, the one error a plain SQL
/// expression can raise), so the host never buffers it. `pg_column_size` of
/// the whole row costs a copy, not a conversion; it counts a value stored
/// compressed at its compressed size, which the host's own bound then catches
/// as the row arrives. The newline ends a trailing `--` comment of the guest's.
fn bounded_rows(statement: &str) -> String {
    format!(
        "WITH inbox_guest_result AS ({statement}\n) SELECT inbox_guest_row.* \
         FROM inbox_guest_result AS inbox_guest_row \
         WHERE CASE WHEN pg_column_size(inbox_guest_row.*) <= {MAX_RESULT_BYTES} THEN true \
         ELSE ('{ROW_TOO_LARGE}: ' || pg_column_size(inbox_guest_row.*))::int IS NULL END"
    )
}

/// What the server's refusal of a row says (in a 22P02 error).
const ROW_TOO_LARGE: &str = "inbox-host result row too large, bytes";

/// Whether a statement failed because [`bounded_rows`] refused a row.
fn refused_row(error: &sqlx::Error) -> bool {
    error.as_database_error().is_some_and(|db| {
        db.code().as_deref() == Some("22P02") && db.message().contains(ROW_TOO_LARGE)
    })
}

/// Fetches and converts rows one at a time until the result ends or passes a
/// bound; past it, the guest gets `IH004` (the rest of the result is discarded
/// by the connection). The bound counts what the host holds: every value, NULLs
/// included, and each row's own overhead.
async fn fetch_bounded(
    query: GuestQuery<'_>,
    tx: &mut Tx,
) -> Result<Result<Rows, DbError>, sqlx::Error> {
    use futures_util::TryStreamExt;
    let mut stream = query.fetch(&mut **tx);
    let (mut columns, mut rows, mut bytes) = (Vec::new(), Vec::new(), 0usize);
    let too_large = || {
        host_error(
            RESULT_TOO_LARGE,
            format!("the result is larger than {MAX_ROWS} rows or {MAX_RESULT_BYTES} bytes: add a LIMIT or aggregate in SQL"),
        )
    };
    loop {
        let row = match stream.try_next().await {
            Ok(Some(row)) => row,
            Ok(None) => break,
            Err(e) if refused_row(&e) => return Ok(Err(too_large())),
            Err(e) => return Err(e),
        };
        if rows.is_empty() {
            columns = column_names(&row);
        }
        let values = match row_values(&row) {
            Ok(values) => values,
            Err(unsupported) => return Ok(Err(unsupported)),
        };
        bytes += row_footprint(&values);
        rows.push(values);
        if rows.len() > MAX_ROWS || bytes > MAX_RESULT_BYTES {
            return Ok(Err(too_large()));
        }
    }
    Ok(Ok(Rows { columns, rows }))
}

/// Longer guest statements are refused before parsing (parse time grows with size).
const MAX_STATEMENT_BYTES: usize = 64 << 10;

/// Statements longer than this are not kept prepared on the connection: sqlx
/// caches up to 100 per connection by text, and guests choose the text.
const CACHED_STATEMENT_BYTES: usize = 4 << 10;

fn guest_statement(sql: &str) -> GuestQuery<'_> {
    sqlx::query(sql).persistent(sql.len() <= CACHED_STATEMENT_BYTES)
}

fn transaction(tx: &mut Option<Tx>) -> wasmtime::Result<&mut Tx> {
    tx.as_mut()
        .ok_or_else(|| wasmtime::format_err!("the db interface is not available outside a message"))
}
