use std::fmt;

use super::HandlerError;

/// What happened to one message, from the runner to the reports (metrics,
/// traces, the lab). The caller acts on it: acknowledge, retry later, set aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The handler succeeded and its effects committed with the inbox row.
    Processed,
    /// The inbox row was committed by an earlier delivery; the handler did not run.
    Duplicate,
    /// Another open transaction holds this message's inbox row; the handler did not
    /// run. Try again later.
    Locked,
    /// Nothing was committed. `error.retryable` says whether trying again can help.
    Failed(HandlerError),
    /// Not handled: recorded in `inbox_host.dead_letters` with this reason. The
    /// consume path's last word on a record it gave up on (the runner never
    /// returns it).
    SetAside(String),
}

impl Outcome {
    /// Whether the message's transaction committed (or had committed before).
    pub fn committed(&self) -> bool {
        matches!(self, Outcome::Processed | Outcome::Duplicate)
    }

    /// A short word for log lines and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Processed => "processed",
            Outcome::Duplicate => "duplicate",
            Outcome::Locked => "locked",
            Outcome::Failed(_) => "failed",
            Outcome::SetAside(_) => "set_aside",
        }
    }
}

/// The class of a failure, for the outcome, the log line and the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// The handler returned an error.
    HandlerError,
    /// The guest panicked or hit `unreachable`.
    Panic,
    /// The guest ran past its deadline (wall-clock time in wasm and WASI calls).
    Deadline,
    /// The guest tried to grow memory past its cap.
    Memory,
    /// The guest overflowed its stack.
    Stack,
    /// A guest statement was refused by the host's SQL rules.
    DbRule,
    /// A message the guest published was refused (a topic not allowed, too many,
    /// too large).
    PublishRule,
    /// A request the guest asked to send after commit was refused (a URL not
    /// allowed, too many, too large).
    RequestRule,
    /// The handler returned ok, but its transaction was no longer committable (a
    /// statement failed and aborted it, or it was ended or replaced).
    TransactionBroken,
    /// Any other trap inside the guest.
    Trap,
    /// The host could not talk to the database.
    Database,
    /// The host itself panicked while handling the message (a host bug that this
    /// message triggers); the message fails, the process goes on.
    HostPanic,
}

impl FailureKind {
    /// Whether the failure is the host's own rule applied to what the handler
    /// asked for (a refused publication), so that trying again, however
    /// often, meets the same refusal: the record is set aside at once.
    pub fn is_final(self) -> bool {
        matches!(self, FailureKind::PublishRule | FailureKind::RequestRule)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::HandlerError => "handler-error",
            FailureKind::Panic => "panic",
            FailureKind::Deadline => "deadline",
            FailureKind::Memory => "memory",
            FailureKind::Stack => "stack",
            FailureKind::DbRule => "db-rule",
            FailureKind::PublishRule => "publish-rule",
            FailureKind::RequestRule => "request-rule",
            FailureKind::TransactionBroken => "transaction-broken",
            FailureKind::Trap => "trap",
            FailureKind::Database => "database",
            FailureKind::HostPanic => "host-panic",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
