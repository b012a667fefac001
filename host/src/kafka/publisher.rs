//! A long-lived producer for records the host itself publishes (dead letters,
//! redrives): idempotent, `acks=all`, with the connection settings of the
//! group member (TLS, SASL) and nothing of its consumer settings.

use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;

use super::connection::connection_config;
use super::error::KafkaResult;

/// How long one record may take to be acknowledged by all in-sync replicas
/// before its delivery counts as failed (and is retried by the caller).
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// A record to publish, borrowed from wherever it is kept.
#[derive(Debug, Clone, Copy)]
pub struct Publication<'a> {
    pub topic: &'a str,
    pub key: Option<&'a [u8]>,
    /// Header keys and values, in order (`None`: a null header).
    pub headers: &'a [(&'a str, Option<&'a [u8]>)],
    /// `None` publishes a tombstone.
    pub payload: Option<&'a [u8]>,
    /// The record's timestamp in ms since the epoch (`None`: when it is sent).
    /// A resend that keeps it lands in the same inbox partition downstream.
    pub timestamp_ms: Option<i64>,
}

/// The producer; cheap to share by reference.
pub struct Publisher {
    producer: FutureProducer,
}

impl Publisher {
    /// A producer for `brokers` with the connection properties of `extra`
    /// (`--kafka-opt`). Builds the configuration without connecting.
    pub fn new(brokers: &str, extra: &[(String, String)]) -> KafkaResult<Self> {
        Ok(Self {
            producer: Self::config(brokers, extra, "0", DELIVERY_TIMEOUT.as_millis()).create()?,
        })
    }

    /// The outbox relay's producer: it batches (`linger.ms=5`), and a record
    /// never times out (`message.timeout.ms=0`): through a broker outage the
    /// idempotent producer retries in order, so a later record of a partition is
    /// never acknowledged while an earlier one failed (which would reorder a key
    /// when the earlier one is sent again). It sends a message of any size
    /// (`message.max.bytes` at librdkafka's most): the host bounds what handlers
    /// stage (`--max-message-bytes`) and the broker's own limit is the one that
    /// counts. Refusals the broker gives at once (too large, unknown topic, no
    /// rights) still fail.
    pub fn for_relay(brokers: &str, extra: &[(String, String)]) -> KafkaResult<Self> {
        let mut relay = Self::config(brokers, extra, "5", 0);
        relay.set("message.max.bytes", "1000000000");
        Ok(Self {
            producer: relay.create()?,
        })
    }

    fn config(
        brokers: &str,
        extra: &[(String, String)],
        linger_ms: &str,
        timeout_ms: u128,
    ) -> ClientConfig {
        let mut config = connection_config(brokers, extra);
        config
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", linger_ms)
            .set("message.timeout.ms", timeout_ms.to_string());
        config
    }

    /// Publishes one record and waits until the brokers acknowledged it;
    /// returns where it landed (partition, offset).
    pub async fn publish(&self, record: &Publication<'_>) -> KafkaResult<(i32, i64)> {
        match self
            .producer
            .send(future_record(record), DELIVERY_TIMEOUT)
            .await
        {
            Ok(delivery) => Ok((delivery.partition, delivery.offset)),
            Err((e, _)) => Err(e.into()),
        }
    }

    /// Publishes records all in flight at once, in order (the producer keeps
    /// each partition's order); returns, per record, whether the brokers
    /// acknowledged it.
    pub async fn publish_all(&self, records: &[Publication<'_>]) -> Vec<KafkaResult<()>> {
        let mut queued = Vec::with_capacity(records.len());
        for record in records {
            let mut outgoing = future_record(record);
            // A full local queue waits for room rather than failing the record.
            queued.push(loop {
                match self.producer.send_result(outgoing) {
                    Ok(delivery) => break Ok(delivery),
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        outgoing = back;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err((e, _)) => break Err(e),
                }
            });
        }
        let mut acknowledged = Vec::with_capacity(queued.len());
        for delivery in queued {
            acknowledged.push(match delivery {
                Ok(delivery) => match delivery.await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err((e, _))) => Err(e.into()),
                    Err(_cancelled) => Err(KafkaError::Canceled.into()),
                },
                Err(e) => Err(e.into()),
            });
        }
        acknowledged
    }
}

fn future_record<'a>(record: &'a Publication<'a>) -> FutureRecord<'a, [u8], [u8]> {
    let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
    for (key, value) in record.headers {
        headers = headers.insert(Header { key, value: *value });
    }
    let mut outgoing = FutureRecord::<[u8], [u8]>::to(record.topic).headers(headers);
    if let Some(payload) = record.payload {
        outgoing = outgoing.payload(payload);
    }
    if let Some(key) = record.key {
        outgoing = outgoing.key(key);
    }
    if let Some(ms) = record.timestamp_ms {
        outgoing = outgoing.timestamp(ms);
    }
    outgoing
}

/// Whether `topic` is a name Kafka accepts: 1 to 249 of `a-z A-Z 0-9 . _ -`,
/// not `.` or `..`. Checked when a name is configured, so a record is never
/// stored for a topic no broker could create.
pub fn check_topic_name(topic: &str) -> Result<(), String> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if topic.is_empty() || topic.len() > 249 || topic == "." || topic == ".." {
        return Err("a topic name has 1 to 249 characters and is not . or ..".into());
    }
    match topic.chars().find(|c| !legal(*c)) {
        Some(c) => Err(format!(
            "{c:?} is not allowed in a topic name (letters, digits, . _ - only)"
        )),
        None => Ok(()),
    }
}
