use std::future::Future;

use super::{FailureKind, Message};

/// The open transaction a handler works in. Dropping it rolls back.
pub type Tx = sqlx::Transaction<'static, sqlx::Postgres>;

/// Something that handles a message inside the inbox transaction.
///
/// The handler receives the transaction by value and must hand it back, whatever
/// happened, so the runner alone decides between commit and rollback.
pub trait Handler: Send + Sync {
    /// The version label stored on the inbox row (a plugin's SHA-256 digest).
    fn version(&self) -> &str;

    /// Handles `message` using `tx`; returns the transaction and the verdict.
    fn handle(
        &self,
        message: &Message,
        tx: Tx,
    ) -> impl Future<Output = (Tx, Result<(), HandlerError>)> + Send;
}

/// Why a handler did not succeed, and whether delivering again can help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct HandlerError {
    pub kind: FailureKind,
    pub retryable: bool,
    pub message: String,
}

impl HandlerError {
    pub fn new(kind: FailureKind, retryable: bool, message: impl Into<String>) -> Self {
        Self {
            kind,
            retryable,
            message: message.into(),
        }
    }
}
