//! What a runner is told: its group, its delivery strategy and the bounds of
//! each transaction, with the CLI's defaults.

use std::time::Duration;

use super::Strategy;

/// How the runner claims messages and bounds their transactions.
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    pub group: String,
    pub worker_id: String,
    pub strategy: Strategy,
    /// How long to wait for another transaction holding the same inbox row.
    pub lock_timeout: Duration,
    /// The longest any single statement (host's or guest's) may run.
    pub statement_timeout: Duration,
    /// The longest a transaction may stay open from its claim to its commit:
    /// the host cancels the handler past it (and PostgreSQL ends a transaction
    /// left idle that long), so a guest cannot hold locks longer.
    pub transaction_timeout: Duration,
    /// The least-privileged role handler statements run under; `None` runs them
    /// as the host's own login (only for trusted native handlers).
    pub guest_role: Option<String>,
    /// How far apart two records of one message id may be stamped, across an
    /// hour boundary, and still be one message (within an hour they always are).
    pub resend_window: Duration,
}

/// The CLI's defaults for the runner's timeouts (`--lock-timeout-ms`,
/// `--statement-timeout-ms`, `--transaction-timeout-ms`), in ms.
pub const DEFAULT_LOCK_TIMEOUT_MS: u64 = 2_000;
pub const DEFAULT_STATEMENT_TIMEOUT_MS: u64 = 10_000;
pub const DEFAULT_TRANSACTION_TIMEOUT_MS: u64 = 30_000;

impl RunnerSettings {
    /// `exactly-once-inbox` with the CLI's default timeouts and guest role:
    /// what the lab, the shadow run and the benchmarks start from.
    pub fn defaults(group: &str, worker_id: &str) -> Self {
        Self {
            group: group.to_string(),
            worker_id: worker_id.to_string(),
            strategy: Strategy::ExactlyOnceInbox,
            lock_timeout: Duration::from_millis(DEFAULT_LOCK_TIMEOUT_MS),
            statement_timeout: Duration::from_millis(DEFAULT_STATEMENT_TIMEOUT_MS),
            transaction_timeout: Duration::from_millis(DEFAULT_TRANSACTION_TIMEOUT_MS),
            guest_role: Some(super::DEFAULT_GUEST_ROLE.to_string()),
            resend_window: Duration::from_secs(super::DEFAULT_RESEND_WINDOW_SECS),
        }
    }
}
