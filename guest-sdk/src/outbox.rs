use std::fmt;

use crate::wit::inbox::host::outbox as wit;
use crate::wit::inbox::host::types::Header as WitHeader;
use crate::HandlerError;

/// A message to publish with [`publish`]: a topic, an optional key, a value and
/// headers.
///
/// ```no_run
/// # fn f() -> Result<(), inbox_guest::HandlerError> {
/// use inbox_guest::{publish, Outgoing};
/// publish(Outgoing::json("invoices-created", &serde_json::json!({"order_id": "o-1"}))?.key("o-1"))?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    topic: String,
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

impl Outgoing {
    /// A message to `topic` carrying `value`.
    pub fn new(topic: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        Self {
            topic: topic.into(),
            key: None,
            value: value.into(),
            headers: Vec::new(),
        }
    }

    /// A message to `topic` carrying `value` as JSON.
    pub fn json<T: serde::Serialize + ?Sized>(
        topic: impl Into<String>,
        value: &T,
    ) -> Result<Self, HandlerError> {
        let bytes = serde_json::to_vec(value)
            .map_err(|e| HandlerError::fatal(format!("the message cannot be JSON: {e}")))?;
        Ok(Self::new(topic, bytes))
    }

    /// The record key: messages with the same topic and key arrive in the order
    /// they were published.
    pub fn key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Adds a header (`message_id`, `traceparent` and `inbox-caused-by` are the
    /// host's and refused).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers
            .push((name.into(), Some(value.into().into_bytes())));
        self
    }
}

/// Publishes `message` when the message's transaction commits (and never if it
/// rolls back). The host derives its `message_id` from the group, the incoming
/// message and the position of this call, so a run repeated after a rollback
/// publishes the same ids. A refused message ([`PublishError`]) fails the run
/// for good, whatever the handler returns.
pub fn publish(message: Outgoing) -> Result<(), PublishError> {
    let headers: Vec<WitHeader> = message
        .headers
        .into_iter()
        .map(|(key, value)| WitHeader { key, value })
        .collect();
    wit::publish(&wit::Message {
        topic: message.topic,
        key: message.key,
        value: message.value,
        headers,
    })
    .map_err(|e| PublishError {
        code: e.code,
        message: e.message,
    })
}

/// A message the host refused to publish (docs/wit.md lists the codes); it names
/// the host flag that would allow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishError {
    /// `IH010` (topic not allowed), `IH011` (too many), `IH012` (too large) or
    /// `IH013` (a reserved or non-text header).
    pub code: String,
    /// What was refused and which flag allows it.
    pub message: String,
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code, self.message)
    }
}

impl std::error::Error for PublishError {}

/// Never retryable: the host refuses the same message again.
impl From<PublishError> for HandlerError {
    fn from(err: PublishError) -> Self {
        HandlerError::fatal(err.to_string())
    }
}
