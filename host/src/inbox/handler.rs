use std::future::Future;

use super::{FailureKind, Message, Outgoing, OutgoingRequest};

/// The open transaction a handler works in. Dropping it rolls back.
pub type Tx = sqlx::Transaction<'static, sqlx::Postgres>;

/// Something that handles a message inside the inbox transaction.
///
/// The handler receives the transaction by value and must hand it back, whatever
/// happened, so the runner alone decides between commit and rollback.
pub trait Handler: Send + Sync {
    /// The version label stored on the inbox row (a plugin's SHA-256 digest).
    fn version(&self) -> &str;

    /// Handles `message` using `tx`; returns the transaction and the verdict:
    /// on success, what is left to do once it commits (the runner stores it in
    /// the same transaction).
    fn handle(
        &self,
        message: &Message,
        tx: Tx,
    ) -> impl Future<Output = (Tx, Result<AfterCommit, HandlerError>)> + Send;
}

/// What a successful run leaves to do after its transaction commits: the
/// messages it published and the HTTP requests it asked for, each in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AfterCommit {
    pub messages: Vec<Outgoing>,
    pub requests: Vec<OutgoingRequest>,
}

impl AfterCommit {
    /// Only messages to publish.
    pub fn messages(messages: Vec<Outgoing>) -> Self {
        Self {
            messages,
            requests: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.messages.is_empty() && self.requests.is_empty()
    }

    /// What the host holds for it, as the bounds count it.
    pub fn bytes(&self) -> usize {
        self.messages.iter().map(Outgoing::bytes).sum::<usize>()
            + self
                .requests
                .iter()
                .map(OutgoingRequest::bytes)
                .sum::<usize>()
    }
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
    /// The message is made storable here, whoever wrote it (a guest can return
    /// megabytes, NUL bytes or escape sequences): see [`storable_text`].
    pub fn new(kind: FailureKind, retryable: bool, message: impl AsRef<str>) -> Self {
        Self {
            kind,
            retryable,
            message: storable_text(message.as_ref(), MAX_FAILURE_TEXT),
        }
    }
}

/// The most bytes of failure text kept per failure (attempts, dead letters, logs).
pub const MAX_FAILURE_TEXT: usize = 4096;

/// `text` as it can be stored in a PostgreSQL `text` column and written on one
/// log line: control characters (NUL, newlines, escape sequences) escaped as
/// `\u{..}`/`\n`, cut at `max` bytes with a marker saying how much was left out.
pub fn storable_text(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max));
    for (at, c) in text.char_indices() {
        let before = out.len();
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
        if out.len() > max {
            out.truncate(before);
            out.push_str(&format!(" [… {} more bytes]", text.len() - at));
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_text_is_escaped_and_bounded() {
        assert_eq!(
            storable_text("poison\0pill\n\x1b[31m", 100),
            "poison\\0pill\\n\\u{1b}[31m"
        );
        let long = "é".repeat(5_000);
        let kept = storable_text(&long, MAX_FAILURE_TEXT);
        assert!(kept.len() <= MAX_FAILURE_TEXT + 32, "{}", kept.len());
        assert!(
            kept.ends_with(" [… 5904 more bytes]"),
            "{}",
            &kept[kept.len() - 40..]
        );
        assert_eq!(storable_text("short", 100), "short");
    }
}
