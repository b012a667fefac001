//! Reading the recent records of topics once, outside any consumer group:
//! nothing is committed and no group's members notice (`inbox-host shadow`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use super::error::{KafkaError, KafkaResult};
use super::{IdSources, Record};

/// How long one broker request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where in each partition a read starts.
#[derive(Debug, Clone, Copy)]
pub enum Start {
    /// The last N records.
    Last(i64),
    /// This offset (or the oldest one kept, if later).
    Offset(i64),
}

/// Reads, from every partition of `topics`, the records from `start` up to
/// the end the partition had when the read began, in offset order per partition.
/// `extra` are `--kafka-opt` connection settings; a group id is used only as a
/// name, never joined and never committed to.
pub fn read_recent(
    brokers: &str,
    extra: &[(String, String)],
    topics: &[String],
    ids: &IdSources,
    start: Start,
    within: Duration,
) -> KafkaResult<Vec<Record>> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("group.id", "inbox-host-shadow-reader")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed");
    for (key, value) in extra {
        if !super::OWNED_PROPERTIES
            .iter()
            .any(|(owned, _)| owned == key)
        {
            config.set(key, value);
        }
    }
    let consumer: BaseConsumer = config.create()?;
    let mut assignment = TopicPartitionList::new();
    let mut ends = HashMap::new();
    for topic in topics {
        let metadata = consumer.fetch_metadata(Some(topic), REQUEST_TIMEOUT)?;
        let partitions = metadata
            .topics()
            .first()
            .map(|t| t.partitions().iter().map(|p| p.id()).collect::<Vec<_>>())
            .unwrap_or_default();
        for partition in partitions {
            let (low, high) = consumer.fetch_watermarks(topic, partition, REQUEST_TIMEOUT)?;
            let from = match start {
                Start::Last(n) => high - n.max(0),
                Start::Offset(offset) => offset,
            }
            .max(low);
            if from < high {
                assignment.add_partition_offset(topic, partition, Offset::Offset(from))?;
                ends.insert((topic.clone(), partition), high);
            }
        }
    }
    let mut records = Vec::new();
    if ends.is_empty() {
        return Ok(records);
    }
    consumer.assign(&assignment)?;
    let deadline = Instant::now() + within;
    while !ends.is_empty() {
        if Instant::now() > deadline {
            return Err(KafkaError::from(
                rdkafka::error::KafkaError::MessageConsumption(
                    rdkafka::types::RDKafkaErrorCode::OperationTimedOut,
                ),
            ));
        }
        let Some(polled) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = polled?;
        let key = (message.topic().to_string(), message.partition());
        let Some(end) = ends.get(&key).copied() else {
            continue;
        };
        if message.offset() < end {
            records.push(Record::from_message(&message, ids));
        }
        if message.offset() + 1 >= end {
            ends.remove(&key);
        }
    }
    Ok(records)
}
