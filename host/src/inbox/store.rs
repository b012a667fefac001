//! The SQL of the runner besides the claim (`claim.rs`): transactions without
//! an inbox row, their state, and the attempts of failing records. Every
//! statement here is the host's, on the host's role.

use std::time::Duration;

use sqlx::{PgConnection, PgPool};

use super::Message;

pub(super) const LOCK_NOT_AVAILABLE: &str = "55P03";

/// Whether running a statement that failed with SQLSTATE `code` again can
/// succeed: a serialization failure or deadlock (class 40), a lock or
/// statement timeout. The rule guests read too (the WIT `db-error`).
pub fn retryable_sqlstate(code: &str) -> bool {
    code.starts_with("40") || code == LOCK_NOT_AVAILABLE || code == "57014"
}

/// Whether an error means the connection itself is gone (trying again on
/// another connection can succeed) rather than that the statement could not run.
pub fn lost_connection(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
    )
}

/// Whether a statement of the host's failed in a way no retry can fix: the
/// server rejected what it was given (a value it cannot store, a check), or it
/// could not be encoded. A lost connection, a timeout, a serialization
/// failure, a server short of resources or shutting down may pass next time.
pub(super) fn fails_for_good(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            !(retryable_sqlstate(&code)
                || ["08", "53", "57P"]
                    .iter()
                    .any(|class| code.starts_with(class)))
        }
        sqlx::Error::Encode(_) => true,
        _ => false,
    }
}

/// Switches the transaction to the host's own role (`none`: the session's) for
/// its statements on the host's tables, with no NOTIFY from the outbox's
/// trigger: the host wakes its relay after the commit (app/relay.rs).
pub(super) async fn as_host(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query(
        "SELECT pg_catalog.set_config('role', 'none', true),
                pg_catalog.set_config('inbox_host.wakes_relay_itself', 'on', true)",
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Returns the transaction to the guest role after a statement of the host's
/// (its own role, `none`, set by [`begin_plain`] or the claim's `set_config`).
pub(super) async fn resume_guest_role(
    conn: &mut PgConnection,
    guest_role: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT set_config('role', coalesce($1, 'none'), true)")
        .bind(guest_role)
        .execute(conn)
        .await?;
    Ok(())
}

/// Who is claiming and how long it may wait.
pub(super) struct ClaimBy<'a> {
    pub group: &'a str,
    pub worker_id: &'a str,
    pub version: &'a str,
    pub lock_timeout: Duration,
    pub statement_timeout: Duration,
    /// Also PostgreSQL's `idle_in_transaction_session_timeout` for the transaction.
    pub transaction_timeout: Duration,
    /// The role the handler's statements run under (`SET LOCAL ROLE`).
    pub guest_role: Option<&'a str>,
    /// How far apart, across an hour boundary, two records of one id are
    /// still one message (`--resend-window-secs`).
    pub resend_window: Duration,
}

/// Sets the transaction's timeouts and the guest role without an inbox row;
/// returns the transaction id.
pub(super) async fn begin_plain(
    conn: &mut PgConnection,
    by: &ClaimBy<'_>,
) -> Result<String, sqlx::Error> {
    let (xid, _role): (String, String) = sqlx::query_as(
        "SELECT pg_current_xact_id()::text, set_config('role', coalesce($3, 'none'), true)
         FROM (SELECT set_config('lock_timeout', $1, true),
                      set_config('statement_timeout', $2, true),
                      set_config('idle_in_transaction_session_timeout', $4, true)) AS transaction_limits",
    )
    .bind(millis(by.lock_timeout))
    .bind(millis(by.statement_timeout))
    .bind(by.guest_role)
    .bind(millis(by.transaction_timeout))
    .fetch_one(conn)
    .await?;
    Ok(xid)
}

/// Who and where the transaction is now.
pub(super) struct TransactionState {
    pub xid: Option<String>,
    pub current_user: String,
    pub session_user: String,
}

/// The transaction `conn` is in now, or an error if it is aborted.
pub(super) async fn transaction_state(
    conn: &mut PgConnection,
) -> Result<TransactionState, sqlx::Error> {
    let (xid, current_user, session_user) = sqlx::query_as(
        "SELECT pg_current_xact_id_if_assigned()::text, current_user::text, session_user::text",
    )
    .fetch_one(conn)
    .await?;
    Ok(TransactionState {
        xid,
        current_user,
        session_user,
    })
}

/// Counts one more failed attempt of `message` (in its own transaction); returns
/// the total so far, across restarts.
pub async fn record_failure(
    pool: &PgPool,
    group: &str,
    message: &Message,
    error: &str,
) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO inbox_host.attempts
             (consumer_group, topic, kafka_partition, kafka_offset, message_id, attempts, last_error)
         VALUES ($1, $2, $3, $4, $5, 1, $6)
         ON CONFLICT (consumer_group, topic, kafka_partition, kafka_offset)
         DO UPDATE SET attempts = inbox_host.attempts.attempts + 1,
                       last_error = EXCLUDED.last_error,
                       last_failed_at = now()
         RETURNING attempts",
    )
    .bind(group)
    .bind(&message.topic)
    .bind(message.partition)
    .bind(message.offset)
    .bind(&message.message_id)
    .bind(super::storable_text(error, super::MAX_FAILURE_TEXT))
    .fetch_one(pool)
    .await
}

/// Removes the attempts row of `message`, which is done or set aside.
pub async fn forget_attempts(
    pool: &PgPool,
    group: &str,
    message: &Message,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "DELETE FROM inbox_host.attempts
         WHERE consumer_group = $1 AND topic = $2 AND kafka_partition = $3 AND kafka_offset = $4",
    )
    .bind(group)
    .bind(&message.topic)
    .bind(message.partition)
    .bind(message.offset)
    .execute(pool)
    .await?;
    Ok(())
}

/// The SQLSTATE of a database error, if it is one.
pub(crate) fn sqlstate(error: &sqlx::Error) -> Option<String> {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .map(|c| c.into_owned())
}

pub(super) fn millis(d: std::time::Duration) -> String {
    format!("{}ms", d.as_millis())
}
