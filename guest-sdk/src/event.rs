use serde::de::DeserializeOwned;

use crate::{wit, HandlerError};

/// The Kafka message being handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The inbox key (includes the consumer group); stable across redeliveries,
    /// so it is a good idempotency key.
    pub message_id: String,
    /// The topic the record was read from.
    pub topic: String,
    /// The record's partition.
    pub partition: i32,
    /// The record's offset within its partition.
    pub offset: i64,
    /// The record key, if any.
    pub key: Option<Vec<u8>>,
    /// The record headers, in record order.
    pub headers: Vec<Header>,
    /// The record value; empty for a null (tombstone) value.
    pub payload: Vec<u8>,
}

/// One Kafka record header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The header name.
    pub key: String,
    /// The header value; `None` for a null header.
    pub value: Option<Vec<u8>>,
}

impl Event {
    /// Decodes the payload as JSON.
    ///
    /// A payload that does not decode is a non-retryable error: redelivering the
    /// same bytes cannot help.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, HandlerError> {
        serde_json::from_slice(&self.payload).map_err(|e| {
            HandlerError::fatal(format!(
                "payload is not valid for {}: {e}",
                std::any::type_name::<T>()
            ))
        })
    }

    /// The payload as UTF-8 text; invalid UTF-8 is a non-retryable error.
    pub fn payload_str(&self) -> Result<&str, HandlerError> {
        std::str::from_utf8(&self.payload)
            .map_err(|e| HandlerError::fatal(format!("payload is not UTF-8: {e}")))
    }

    /// The value of the last header named `name` (Kafka allows repeats).
    ///
    /// `None` if there is no such header or its value is null.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .rev()
            .find(|h| h.key == name)
            .and_then(|h| h.value.as_deref())
    }
}

impl From<wit::Event> for Event {
    fn from(e: wit::Event) -> Self {
        Self {
            message_id: e.message_id,
            topic: e.topic,
            partition: e.partition,
            offset: e.offset,
            key: e.key,
            headers: e
                .headers
                .into_iter()
                .map(|h| Header {
                    key: h.key,
                    value: h.value,
                })
                .collect(),
            payload: e.payload,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(payload: &[u8]) -> Event {
        Event {
            message_id: "m".into(),
            topic: "t".into(),
            partition: 0,
            offset: 0,
            key: None,
            headers: vec![
                Header {
                    key: "h".into(),
                    value: Some(b"1".to_vec()),
                },
                Header {
                    key: "h".into(),
                    value: Some(b"2".to_vec()),
                },
                Header {
                    key: "null".into(),
                    value: None,
                },
            ],
            payload: payload.to_vec(),
        }
    }

    #[test]
    fn json_decode_failure_is_fatal() {
        let err = event(b"{").json::<serde_json::Value>().unwrap_err();
        assert!(!err.is_retryable());
        assert!(err
            .message()
            .starts_with("payload is not valid for serde_json::value::Value: "));
        assert_eq!(event(b"[1]").json::<Vec<u8>>().unwrap(), [1]);
    }

    #[test]
    fn headers_and_text() {
        let e = event(b"SELECT 1");
        assert_eq!(e.header("h"), Some(&b"2"[..]));
        assert_eq!(e.header("null"), None);
        assert_eq!(e.header("missing"), None);
        assert_eq!(e.payload_str().unwrap(), "SELECT 1");
        assert!(!event(&[0xff]).payload_str().unwrap_err().is_retryable());
    }
}
