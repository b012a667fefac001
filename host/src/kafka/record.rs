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
}

impl Record {
    /// `topic:partition:offset`, for log lines.
    pub fn coordinates(&self) -> String {
        format!("{}:{}:{}", self.topic, self.partition, self.offset)
    }
}
