//! A record a partition worker holds until it is done: the runner's message,
//! and, once decided, why it is set aside instead of handled.

use crate::inbox::{self, Message};
use crate::kafka::Record;

/// A record taken from the stream, owned by the worker until it is done.
pub(super) struct Pending {
    pub message: Message,
    /// Set once the record is to be set aside: from then on only the set-aside
    /// (dead-letter row, dead-letter topic) is retried, never the handler.
    pub aside: Option<Aside>,
}

/// Why a record is set aside, decided once.
#[derive(Debug, Clone)]
pub(super) struct Aside {
    pub reason: String,
    /// The failure's kind, or `unusable` for a record the host cannot use.
    pub kind: &'static str,
    /// Failed attempts before it was set aside (0: the handler never ran).
    pub attempts: u32,
}

impl Pending {
    /// Moves a record into the runner's message, setting aside what the host
    /// cannot use (no id, an unreadable header, larger than `max_message_bytes`).
    pub fn of(record: Record, max_message_bytes: usize) -> Self {
        let (message, mut unusable) = message_of(record);
        if unusable.is_none() && message.payload.len() > max_message_bytes {
            unusable = Some(format!(
                "payload of {} bytes exceeds --max-message-bytes {max_message_bytes}",
                message.payload.len()
            ));
        }
        Self {
            message,
            aside: unusable.map(|reason| Aside {
                reason,
                kind: "unusable",
                attempts: 0,
            }),
        }
    }

    /// The message id to record with a dead letter (none for a record without one).
    pub fn message_id(&self) -> Option<&str> {
        Some(self.message.message_id.as_str()).filter(|id| !id.is_empty())
    }
}

/// Moves a record into the runner's message (no field copied), with why it
/// cannot be used, if so. What `shadow` reads goes through here too.
pub fn message_of(record: Record) -> (Message, Option<String>) {
    let (message_id, unusable) = match record.message_id {
        Ok(id) => (id, None),
        Err(why) => (String::new(), Some(why)),
    };
    let headers = record
        .headers
        .into_iter()
        .map(|h| inbox::Header {
            key: h.key,
            value: h.value,
        })
        .collect();
    let message = Message {
        message_id,
        topic: record.topic,
        partition: record.partition,
        offset: record.offset,
        timestamp_ms: record.timestamp_ms,
        key: record.key,
        headers,
        payload: record.payload,
    };
    (message, unusable)
}
