use std::fmt;

use crate::DbError;

/// Why a handler did not succeed. The transaction is rolled back either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerError {
    message: String,
    retryable: bool,
}

impl HandlerError {
    /// An error that delivering the message again may fix (a deadlock, a timeout).
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: true,
        }
    }

    /// An error that redelivery cannot fix (a malformed message, a broken invariant).
    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: false,
        }
    }

    /// The human-readable reason.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the host should deliver the message again.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    pub(crate) fn into_message(self) -> String {
        self.message
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HandlerError {}

/// Retryable exactly when [`DbError::is_retryable`] is.
impl From<DbError> for HandlerError {
    fn from(err: DbError) -> Self {
        Self {
            retryable: err.is_retryable(),
            message: err.to_string(),
        }
    }
}
