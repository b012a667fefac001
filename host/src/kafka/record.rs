use std::panic::{catch_unwind, AssertUnwindSafe};

use rdkafka::message::{BorrowedMessage, Headers as _, Message as _};

use super::{IdSource, IdSources};

/// One record header; `value` is `None` for a null header. A header whose key
/// is not UTF-8 (any non-Java producer can write one) is kept as U+FFFD without
/// its value, and the record is unusable: see [`Record::message_id`].
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
    /// The message id, or why the record cannot be used (no id found, a header
    /// the host cannot read): such a record is set aside, never skipped.
    pub message_id: Result<String, String>,
    /// When the record was produced (or appended), in ms since 1970, if known.
    pub timestamp_ms: Option<i64>,
    /// Whether the id came from the coordinates (the caller warns once per topic).
    pub id_from_coordinates: bool,
}

impl Record {
    /// Copies a fetched message out of librdkafka's buffer and finds its id.
    /// Never panics on what a producer wrote: a header that cannot be read, or
    /// anything else that goes wrong, makes the record unusable with the reason.
    pub(super) fn from_message(m: &BorrowedMessage<'_>, ids: &IdSources) -> Self {
        let read = catch_unwind(AssertUnwindSafe(|| Self::read(m, ids)));
        read.unwrap_or_else(|panic| Record {
            topic: m.topic().to_string(),
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            headers: Vec::new(),
            payload: m.payload().unwrap_or_default().to_vec(),
            message_id: Err(format!(
                "the host could not read the record ({}); its headers are not kept",
                crate::panics::text(&*panic)
            )),
            timestamp_ms: m.timestamp().to_millis(),
            id_from_coordinates: false,
        })
    }

    fn read(m: &BorrowedMessage<'_>, ids: &IdSources) -> Self {
        let topic = m.topic().to_string();
        let (headers, unreadable) = headers_of(m);
        let payload = m.payload().unwrap_or_default().to_vec();
        let coordinates = || format!("{}:{}:{}", topic, m.partition(), m.offset());
        let found = ids.extract(&headers, &payload, coordinates);
        let id_from_coordinates = matches!(found, Ok((_, IdSource::Coordinates)));
        let message_id = match unreadable {
            Some(why) => Err(why),
            None => found.map(|(id, _)| id),
        };
        Record {
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            headers,
            payload,
            message_id,
            timestamp_ms: m.timestamp().to_millis(),
            id_from_coordinates,
            topic,
        }
    }
}

/// The headers in order, with why the record is unusable if one cannot be read.
/// rdkafka's accessor panics on a key that is not UTF-8 (and `unsafe` is not
/// ours to write): each header is read under `catch_unwind`, and a key that
/// cannot be read is kept as `\u{FFFD}` with the reason naming its position.
fn headers_of(m: &BorrowedMessage<'_>) -> (Vec<RecordHeader>, Option<String>) {
    let Some(list) = m.headers() else {
        return (Vec::new(), None);
    };
    let mut headers = Vec::with_capacity(list.count());
    let mut unreadable = None;
    for index in 0..list.count() {
        match catch_unwind(AssertUnwindSafe(|| list.try_get(index))) {
            Ok(Some(h)) => headers.push(RecordHeader {
                key: h.key.to_string(),
                value: h.value.map(<[u8]>::to_vec),
            }),
            Ok(None) => break,
            Err(_) => {
                unreadable.get_or_insert_with(|| {
                    format!(
                        "header {index}'s key is not UTF-8 (kept as U+FFFD); \
                         a handler can only be given text keys"
                    )
                });
                headers.push(RecordHeader {
                    key: char::REPLACEMENT_CHARACTER.to_string(),
                    value: None,
                });
            }
        }
    }
    (headers, unreadable)
}
