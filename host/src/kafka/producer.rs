use std::time::Duration;

use super::connection::connection_config;
use super::error::KafkaResult;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// A record to publish (for the lab, the demo and the tests).
#[derive(Debug, Clone, Default)]
pub struct OutgoingRecord {
    pub topic: String,
    pub partition: Option<i32>,
    pub key: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
    pub payload: Vec<u8>,
    /// The record's timestamp in ms since the epoch (`None`: when it is sent).
    pub timestamp_ms: Option<i64>,
}

/// Publishes records, all in flight at once; returns each one's (partition, offset).
pub async fn produce(brokers: &str, records: &[OutgoingRecord]) -> KafkaResult<Vec<(i32, i64)>> {
    produce_with(brokers, &[], records).await
}

/// [`produce`] with the connection properties of `extra` (TLS, SASL), as
/// `--kafka-opt` gives them.
pub async fn produce_with(
    brokers: &str,
    extra: &[(String, String)],
    records: &[OutgoingRecord],
) -> KafkaResult<Vec<(i32, i64)>> {
    let producer: FutureProducer = connection_config(brokers, extra)
        .set("message.timeout.ms", "30000")
        .set("linger.ms", "5")
        .create()?;
    let mut pending = Vec::with_capacity(records.len());
    for r in records {
        let mut headers = OwnedHeaders::new();
        for (key, value) in &r.headers {
            headers = headers.insert(Header {
                key,
                value: Some(value),
            });
        }
        let mut record = FutureRecord::<[u8], [u8]>::to(&r.topic)
            .payload(&r.payload)
            .headers(headers);
        if let Some(key) = &r.key {
            record = record.key(key);
        }
        if let Some(p) = r.partition {
            record = record.partition(p);
        }
        if let Some(ms) = r.timestamp_ms {
            record = record.timestamp(ms);
        }
        pending.push(producer.send_result(record).map_err(|(e, _)| e)?);
    }
    let mut placed = Vec::with_capacity(pending.len());
    for delivery in pending {
        match delivery.await {
            Ok(Ok(d)) => placed.push((d.partition, d.offset)),
            Ok(Err((e, _))) => return Err(e.into()),
            Err(_cancelled) => return Err(rdkafka::error::KafkaError::Canceled.into()),
        }
    }
    Ok(placed)
}

/// The offset the group has committed for a partition (the next one it will
/// read), as the broker reports it; `None` if nothing was committed.
pub fn committed_offset(
    brokers: &str,
    group: &str,
    topic: &str,
    partition: i32,
) -> KafkaResult<Option<i64>> {
    Ok(committed(brokers, group, topic, &[partition])?[0])
}

/// The group's committed offsets of partitions `0..partitions` of `topic`, in
/// one request.
pub fn committed_offsets(
    brokers: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> KafkaResult<Vec<Option<i64>>> {
    committed(brokers, group, topic, &(0..partitions).collect::<Vec<_>>())
}

fn committed(
    brokers: &str,
    group: &str,
    topic: &str,
    partitions: &[i32],
) -> KafkaResult<Vec<Option<i64>>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    for p in partitions {
        tpl.add_partition(topic, *p);
    }
    let committed = consumer.committed_offsets(tpl, Duration::from_secs(10))?;
    Ok(partitions
        .iter()
        .map(|p| {
            committed
                .find_partition(topic, *p)
                .and_then(|e| match e.offset() {
                    Offset::Offset(o) => Some(o),
                    _ => None,
                })
        })
        .collect())
}

/// The high watermark (next offset to be written) of partitions `0..partitions`.
pub fn high_watermarks(brokers: &str, topic: &str, partitions: i32) -> KafkaResult<Vec<i64>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()?;
    (0..partitions)
        .map(|p| {
            Ok(consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))?
                .1)
        })
        .collect()
}
