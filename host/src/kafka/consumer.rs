use std::collections::{HashMap, HashSet};
use std::time::Duration;

use rdkafka::consumer::{CommitMode, Consumer as _, StreamConsumer};
use rdkafka::error::KafkaResult;
use rdkafka::message::{BorrowedMessage, Headers, Message as _};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use tokio::time::Instant;

use super::context::{lock, GroupContext, Partition};
use super::{IdSource, IdSources, Record, RecordHeader};

/// Exponential backoff between retries of a failed record.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Backoff {
    fn delay(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(20));
        self.initial.saturating_mul(factor).min(self.max)
    }
}

/// How to join the group.
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    pub brokers: String,
    pub group: String,
    pub topics: Vec<String>,
    pub id_sources: IdSources,
    pub backoff: Backoff,
    /// Extra librdkafka properties (`--kafka-opt key=value`), applied last.
    pub extra: Vec<(String, String)>,
}

/// A retry scheduled for a failed record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// How many times this record has failed in a row (1 for the first failure).
    pub attempt: u32,
    pub delay: Duration,
}

/// A partition held at a failed record: paused until `until`, then rewound.
struct Blocked {
    offset: i64,
    attempt: u32,
    until: Instant,
    rewound: bool,
}

/// A group member that never lets an offset past a failed record be committed:
/// after a failure the partition is paused, rewound to that record and retried
/// after a backoff, while the other partitions keep flowing.
pub struct Consumer {
    inner: StreamConsumer<GroupContext>,
    ids: IdSources,
    backoff: Backoff,
    blocked: HashMap<Partition, Blocked>,
    warned_coordinates: HashSet<String>,
}

impl Consumer {
    pub fn join(settings: &ConsumerSettings) -> KafkaResult<Self> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &settings.brokers)
            .set("group.id", &settings.group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", "10000")
            .set("heartbeat.interval.ms", "1000");
        for (key, value) in &settings.extra {
            config.set(key, value);
        }
        let inner: StreamConsumer<GroupContext> =
            config.create_with_context(GroupContext::default())?;
        let topics: Vec<&str> = settings.topics.iter().map(String::as_str).collect();
        inner.subscribe(&topics)?;
        Ok(Self {
            inner,
            ids: settings.id_sources.clone(),
            backoff: settings.backoff,
            blocked: HashMap::new(),
            warned_coordinates: HashSet::new(),
        })
    }

    /// The next record to handle. Records of a partition held at a failure are
    /// not returned until that failure is retried.
    pub async fn next(&mut self) -> KafkaResult<Record> {
        loop {
            forget_moved_partitions(&self.inner, &mut self.blocked);
            let wake = self
                .blocked
                .values()
                .filter(|b| !b.rewound)
                .map(|b| b.until)
                .min();
            tracing::debug!(
                ?wake,
                blocked = self.blocked.len(),
                "waiting for the next record"
            );
            let received = match wake {
                Some(at) => tokio::select! {
                    m = self.inner.recv() => Some(m),
                    _ = tokio::time::sleep_until(at) => None,
                },
                None => Some(self.inner.recv().await),
            };
            match received {
                None => {
                    tracing::trace!("backoff over: rewinding held partitions");
                    self.rewind_due()?
                }
                Some(Err(e)) => return Err(e),
                Some(Ok(m)) => {
                    // Rebalances run inside `recv`: settle them before this record,
                    // so they never clear a hold placed after it.
                    forget_moved_partitions(&self.inner, &mut self.blocked);
                    let partition = (m.topic().to_string(), m.partition());
                    match self.blocked.get(&partition) {
                        // Fetched before the rewind took effect: it comes again.
                        Some(b) if m.offset() > b.offset || !b.rewound => continue,
                        _ => return Ok(record_of(&self.ids, &mut self.warned_coordinates, &m)),
                    }
                }
            }
        }
    }

    /// Commits the offset after `record` (and so `record` and everything before
    /// it in its partition). `Sync` waits for the broker.
    pub fn acknowledge(&mut self, record: &Record, mode: CommitMode) -> KafkaResult<()> {
        let partition = (record.topic.clone(), record.partition);
        let next = record.offset + 1;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&record.topic, record.partition, Offset::Offset(next))?;
        self.inner.commit(&tpl, mode)?;
        if self
            .blocked
            .get(&partition)
            .is_some_and(|b| record.offset >= b.offset)
        {
            let held = self.blocked.remove(&partition).is_some_and(|b| !b.rewound);
            if held {
                // Acknowledged while paused (set aside after its last attempt):
                // records after it were dropped by the hold, so fetch from `next`.
                let mut resume = TopicPartitionList::new();
                resume.add_partition(&record.topic, record.partition);
                self.inner.resume(&resume)?;
                self.inner.seek(
                    &record.topic,
                    record.partition,
                    Offset::Offset(next),
                    Duration::ZERO,
                )?;
            }
        }
        lock(&self.inner.context().acked).insert(partition, next);
        Ok(())
    }

    /// Holds `record`'s partition at `record` and schedules a retry with
    /// exponential backoff; later records of that partition wait.
    pub fn retry_later(&mut self, record: &Record) -> KafkaResult<Retry> {
        let partition = (record.topic.clone(), record.partition);
        let attempt = match self.blocked.get(&partition) {
            Some(b) if b.offset == record.offset => b.attempt + 1,
            _ => 1,
        };
        let delay = self.backoff.delay(attempt);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&record.topic, record.partition);
        self.inner.pause(&tpl)?;
        self.blocked.insert(
            partition,
            Blocked {
                offset: record.offset,
                attempt,
                until: Instant::now() + delay,
                rewound: false,
            },
        );
        Ok(Retry { attempt, delay })
    }

    /// Whether this member has been assigned partitions and the group's committed
    /// offset has reached the high watermark on each (nothing left to deliver).
    /// Asks the broker, so it blocks briefly: call it off the async threads.
    pub fn caught_up(&self) -> KafkaResult<bool> {
        let assignment = self.inner.assignment()?;
        if assignment.count() == 0 {
            return Ok(false);
        }
        let committed = self
            .inner
            .committed_offsets(assignment, Duration::from_secs(1))?;
        for element in committed.elements() {
            let (_, high) = self.inner.fetch_watermarks(
                element.topic(),
                element.partition(),
                Duration::from_secs(1),
            )?;
            let at = match element.offset() {
                Offset::Offset(o) => o,
                _ => 0,
            };
            if at < high {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Commits everything acknowledged (waiting for the broker) and leaves the group.
    pub fn close(self) -> KafkaResult<()> {
        let acked = lock(&self.inner.context().acked).clone();
        let mut tpl = TopicPartitionList::new();
        for ((topic, partition), next) in acked {
            tpl.add_partition_offset(&topic, partition, Offset::Offset(next))?;
        }
        if tpl.count() > 0 {
            self.inner.commit(&tpl, CommitMode::Sync)?;
        }
        // Unsubscribing revokes the partitions here and now; dropping then closes
        // the consumer, which leaves the group so the partitions move at once.
        self.inner.unsubscribe();
        drop(self.inner);
        Ok(())
    }

    fn rewind_due(&mut self) -> KafkaResult<()> {
        let now = Instant::now();
        for ((topic, partition), b) in self
            .blocked
            .iter_mut()
            .filter(|(_, b)| !b.rewound && b.until <= now)
        {
            // Resume, then seek without waiting (a seek on a paused partition
            // waits for a fetcher that never runs). Anything fetched from the old
            // position is dropped by `next` until the failed record comes again.
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(topic, *partition);
            self.inner.resume(&tpl)?;
            self.inner
                .seek(topic, *partition, Offset::Offset(b.offset), Duration::ZERO)?;
            b.rewound = true;
        }
        Ok(())
    }
}

fn record_of(
    ids: &IdSources,
    warned_coordinates: &mut HashSet<String>,
    m: &BorrowedMessage<'_>,
) -> Record {
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
    let message_id = ids
            .extract(&headers, &payload, coordinates)
            .map(|(id, source)| {
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
    }
}

/// A rebalance moved partitions: their held failures belong to whoever owns them
/// now, starting from the committed offset.
fn forget_moved_partitions(
    consumer: &StreamConsumer<GroupContext>,
    blocked: &mut HashMap<Partition, Blocked>,
) {
    let moved = std::mem::take(&mut *lock(&consumer.context().moved));
    for p in moved {
        blocked.remove(&p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_initial_delay_up_to_the_maximum() {
        let backoff = Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(1),
        };
        let delays: Vec<u128> = (1..=5).map(|a| backoff.delay(a).as_millis()).collect();
        assert_eq!(delays, [200, 400, 800, 1000, 1000]);
        assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(1));
    }
}
