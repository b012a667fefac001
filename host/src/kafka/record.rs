use std::collections::HashSet;

use rdkafka::message::{BorrowedMessage, Headers, Message as _};

use super::{IdSource, IdSources};

/// One record header; `value` is `None` for a null header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHeader {
    pub key: String,
    pub value: Option<Vec<u8>>,
}

/// A consumed record, owned, with the message id the configured sources found.
#[derive(Debug, Clone)]
pub struct Record {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub headers: Vec<RecordHeader>,
    /// The value; empty for a null (tombstone) value.
    pub payload: Vec<u8>,
    /// The message id, or why none of the configured sources gave one.
    pub message_id: Result<String, String>,
    /// When the record was produced (or appended), in ms since 1970, if known.
    pub timestamp_ms: Option<i64>,
}

impl Record {
    /// Copies a fetched message out of librdkafka's buffer and finds its id,
    /// warning once per topic when only the coordinates give one.
    pub(super) fn from_message(
        m: &BorrowedMessage<'_>,
        ids: &IdSources,
        warned_coordinates: &mut HashSet<String>,
    ) -> Self {
        let headers: Vec<RecordHeader> = m
            .headers()
            .map(|hs| {
                hs.iter()
                    .map(|h| RecordHeader {
                        key: h.key.to_string(),
                        value: h.value.map(<[u8]>::to_vec),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let payload = m.payload().unwrap_or_default().to_vec();
        let coordinates = || format!("{}:{}:{}", m.topic(), m.partition(), m.offset());
        let message_id = ids.extract(&headers, &payload, coordinates).map(|(id, source)| {
            if *source == IdSource::Coordinates && warned_coordinates.insert(m.topic().to_string()) {
                tracing::warn!(
                    topic = m.topic(),
                    "records carry no message id header or field; using topic:partition:offset, \
                     which changes when a message is republished (upstream duplicates will not be caught)"
                );
            }
            id
        });
        Record {
            topic: m.topic().to_string(),
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            headers,
            payload,
            message_id,
            timestamp_ms: m.timestamp().to_millis(),
        }
    }
}
