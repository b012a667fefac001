//! `--dead-letter-topic`: a set-aside record is published there for the rest
//! of a Kafka estate, with its original key, value and headers, and headers
//! saying where it came from and why it was set aside. Header names follow
//! Spring Kafka's `kafka_dlt-*` where one exists (values are UTF-8 text here,
//! where Spring writes partition, offset and timestamp as big-endian binary).

use crate::inbox::{DeadLetter, Message};
use crate::kafka::{KafkaResult, Publication, Publisher};

/// The topic and its producer.
pub struct DeadLetterTopic {
    name: String,
    publisher: Publisher,
}

/// The diagnostic headers added to every dead letter, in order.
pub const HEADERS: [&str; 10] = [
    "kafka_dlt-original-topic",
    "kafka_dlt-original-partition",
    "kafka_dlt-original-offset",
    "kafka_dlt-original-timestamp",
    "kafka_dlt-original-consumer-group",
    "kafka_dlt-exception-message",
    "kafka_dlt-exception-fqcn",
    "inbox_host-attempts",
    "inbox_host-plugin-digest",
    "inbox_host-message-id",
];

impl DeadLetterTopic {
    pub fn new(name: String, publisher: Publisher) -> Self {
        Self { name, publisher }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Publishes `letter` and waits for the brokers' acknowledgement.
    pub async fn publish(&self, letter: &DeadLetter<'_>) -> KafkaResult<()> {
        let message = letter.message;
        let values: [Option<String>; 10] = [
            Some(message.topic.clone()),
            Some(message.partition.to_string()),
            Some(message.offset.to_string()),
            message.timestamp_ms.map(|ms| ms.to_string()),
            Some(letter.group.to_string()),
            Some(letter.reason.to_string()),
            Some(letter.kind.to_string()),
            Some(letter.attempts.to_string()),
            letter.plugin_digest.map(str::to_string),
            letter.message_id.map(str::to_string),
        ];
        let mut headers = original_headers(message);
        headers.extend(
            HEADERS
                .iter()
                .zip(&values)
                .filter_map(|(key, value)| Some((*key, Some(value.as_deref()?.as_bytes())))),
        );
        let publication = Publication {
            topic: &self.name,
            key: message.key.as_deref(),
            headers: &headers,
            payload: Some(&message.payload),
            timestamp_ms: None,
        };
        self.publisher.publish(&publication).await.map(drop)
    }
}

/// A message's headers, borrowed, in their order: what a republished record carries.
pub fn original_headers(message: &Message) -> Vec<(&str, Option<&[u8]>)> {
    message
        .headers
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_deref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::HEADERS;
    use crate::inbox::RESERVED_HEADER_PREFIXES;

    #[test]
    fn every_dead_letter_header_is_one_a_handler_may_not_publish() {
        for header in HEADERS {
            assert!(
                RESERVED_HEADER_PREFIXES
                    .iter()
                    .any(|p| header.starts_with(p)),
                "{header} is not reserved: a handler could forge it"
            );
        }
    }
}
