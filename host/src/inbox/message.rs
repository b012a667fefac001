/// One record header. `value` is `None` for a null header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub key: String,
    pub value: Option<Vec<u8>>,
}

impl Header {
    /// Its size as the bounds count it: name and value.
    pub fn bytes(&self) -> usize {
        self.key.len() + self.value.as_ref().map_or(0, Vec::len)
    }
}

/// A message as the runner sees it: where it came from and what it carries.
///
/// `message_id` is the inbox key (with the consumer group); the caller decides
/// where it comes from.
#[derive(Debug, Clone)]
pub struct Message {
    pub message_id: String,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// The record's Kafka timestamp in ms since the epoch (`None` when it has
    /// none): the same on every delivery, it picks the inbox row's partition.
    pub timestamp_ms: Option<i64>,
    pub key: Option<Vec<u8>>,
    pub headers: Vec<Header>,
    pub payload: Vec<u8>,
}
