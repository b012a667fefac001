//! What a guest publishes through the WIT `outbox` interface (bound on
//! `DbSession` in `db_session.rs`): checked against its limits and kept for
//! the runner, which stores it in the inbox transaction when the handler
//! succeeds.

use super::bindings::inbox::host::outbox::{Message, PublishError};
use super::limits::PublishLimits;
use crate::inbox::{Header, Outgoing, RESERVED_HEADERS};

/// Codes of a refused message (docs/wit.md).
const TOPIC_NOT_ALLOWED: &str = "IH010";
const TOO_MANY: &str = "IH011";
const TOO_LARGE: &str = "IH012";
const BAD_HEADER: &str = "IH013";

/// One message's publications.
pub(crate) struct OutboxSession {
    limits: PublishLimits,
    published: Vec<Outgoing>,
    /// The first refused message: the run fails whatever the guest returns.
    pub refused: Option<PublishError>,
}

impl OutboxSession {
    pub fn new(limits: PublishLimits) -> Self {
        Self {
            limits,
            published: Vec::new(),
            refused: None,
        }
    }

    /// Forgets the previous message's publications (a reused instance).
    pub fn next_message(&mut self) {
        self.published.clear();
        self.refused = None;
    }

    /// What the guest published, in order.
    pub fn take(&mut self) -> Vec<Outgoing> {
        std::mem::take(&mut self.published)
    }

    /// Keeps the message, or refuses it (the first refusal fails the run).
    pub fn publish(&mut self, message: Message) -> Result<(), PublishError> {
        let kept = self.keep(message);
        if let Err(e) = &kept {
            tracing::warn!(code = %e.code, "guest publication refused: {}", e.message);
            self.refused.get_or_insert_with(|| e.clone());
        }
        kept
    }

    fn keep(&mut self, message: Message) -> Result<(), PublishError> {
        let refused = |code: &str, message: String| PublishError {
            code: code.to_string(),
            message,
        };
        let limits = &self.limits;
        if !limits.topics.contains(&message.topic) {
            let allowed = if limits.topics.is_empty() {
                "none".to_string()
            } else {
                limits.topics.join(", ")
            };
            return Err(refused(
                TOPIC_NOT_ALLOWED,
                format!(
                    "publishing to topic {:?} is not allowed (allowed: {allowed}); start the host \
                     with --publish-topic {} to allow it",
                    message.topic, message.topic
                ),
            ));
        }
        if self.published.len() >= limits.max_messages {
            return Err(refused(
                TOO_MANY,
                format!(
                    "a record's run may publish at most {} messages (--max-publish)",
                    limits.max_messages
                ),
            ));
        }
        let mut headers = Vec::with_capacity(message.headers.len());
        let mut bytes = message.value.len() + message.key.as_ref().map_or(0, Vec::len);
        for h in message.headers {
            if RESERVED_HEADERS.contains(&h.key.as_str()) {
                return Err(refused(
                    BAD_HEADER,
                    format!("header {:?} is set by the host; leave it out", h.key),
                ));
            }
            if let Some(value) = &h.value {
                if std::str::from_utf8(value).is_err() {
                    return Err(refused(
                        BAD_HEADER,
                        format!("the value of header {:?} is not UTF-8 text (the outbox stores headers as text)", h.key),
                    ));
                }
            }
            bytes += h.key.len() + h.value.as_ref().map_or(0, Vec::len);
            headers.push(Header {
                key: h.key,
                value: h.value,
            });
        }
        if bytes > limits.max_message_bytes {
            return Err(refused(
                TOO_LARGE,
                format!(
                    "a message to {:?} of {bytes} bytes is over --max-message-bytes ({})",
                    message.topic, limits.max_message_bytes
                ),
            ));
        }
        self.published.push(Outgoing {
            topic: message.topic,
            key: message.key,
            value: message.value,
            headers,
        });
        Ok(())
    }
}
