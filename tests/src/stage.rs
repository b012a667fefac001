//! A database, a broker with a fresh topic, and real `inbox-host` processes
//! consuming it: the stage of the end-to-end tests and benchmarks.

use inbox_host::kafka::{self, OutgoingRecord};

use crate::broker::TestBroker;
use crate::host::Host;
use crate::{unique, TestDb};

pub struct Stage {
    pub db: TestDb,
    pub broker: TestBroker,
    pub topic: String,
    pub group: String,
}

impl Stage {
    pub async fn new(partitions: i32) -> Self {
        let db = TestDb::start().await;
        let broker = TestBroker::start();
        let topic = unique("orders");
        broker
            .create_topic(&topic, partitions)
            .await
            .expect("topic");
        Self {
            db,
            broker,
            topic,
            group: unique("billing"),
        }
    }

    /// Brokers, topic and database come from the environment, so the host's
    /// command line is the README's: `--plugin <file> --group <group>`. It
    /// serves its status endpoint (on a port the kernel picks unless `extra`
    /// names one: [`Host::status_addr`]), so tests wait on `/metrics` and
    /// `/health/ready` rather than on log lines.
    pub fn spawn_host(&self, plugin: &std::path::Path, extra: &[&str]) -> Host {
        self.spawn_host_with_env(plugin, extra, &[])
    }

    /// [`Stage::spawn_host`] with more environment variables.
    pub fn spawn_host_with_env(
        &self,
        plugin: &std::path::Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Host {
        self.spawn_member(&self.group, &self.topic, plugin, extra, env)
    }

    /// A host of another group, consuming another topic of this stage's broker
    /// and database (the next step of a pipeline).
    pub fn spawn_member(
        &self,
        group: &str,
        topic: &str,
        plugin: &std::path::Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Host {
        let plugin = plugin.to_str().expect("utf-8 path");
        let mut args = vec!["--plugin", plugin, "--group", group];
        if !extra.contains(&"--status-addr") {
            args.extend(["--status-addr", "127.0.0.1:0"]);
        }
        args.extend_from_slice(extra);
        let mut vars = vec![
            ("KAFKA_BROKERS", self.broker.bootstrap()),
            ("INBOX_TOPIC", topic),
            ("DATABASE_URL", &self.db.url),
            ("INBOX_RETRY_INITIAL_MS", "50"),
            ("INBOX_RETRY_MAX_MS", "500"),
        ];
        vars.extend_from_slice(env);
        Host::spawn(&args, &vars)
    }

    pub async fn produce(&self, records: Vec<OutgoingRecord>) -> Vec<(i32, i64)> {
        kafka::produce(self.broker.bootstrap(), &records)
            .await
            .expect("produce")
    }

    /// A record for this stage's topic with a `message_id` header.
    pub fn record(
        &self,
        id: &str,
        partition: Option<i32>,
        payload: impl Into<Vec<u8>>,
    ) -> OutgoingRecord {
        OutgoingRecord {
            topic: self.topic.clone(),
            partition,
            timestamp_ms: None,
            key: Some(id.as_bytes().to_vec()),
            headers: vec![("message_id".into(), id.as_bytes().to_vec())],
            payload: payload.into(),
        }
    }

    /// An order for billing, spread over partitions by key.
    pub fn order(&self, id: &str, amount: i64) -> OutgoingRecord {
        let payload = serde_json::json!({ "order_id": id, "amount": amount }).to_string();
        self.record(id, None, payload)
    }

    /// The high watermark of each partition of the stage's topic.
    pub async fn high_watermarks(&self, partitions: i32) -> Vec<i64> {
        let (brokers, topic) = (self.broker.bootstrap().to_string(), self.topic.clone());
        tokio::task::spawn_blocking(move || kafka::high_watermarks(&brokers, &topic, partitions))
            .await
            .expect("task")
            .expect("watermarks")
    }

    /// The sum of the group's committed offsets over partitions `0..partitions`.
    pub async fn committed_total(&self, partitions: i32) -> i64 {
        self.committed_per_partition(partitions).await.iter().sum()
    }

    /// The group's committed offset of each of partitions `0..partitions` (0
    /// where nothing was committed, or the broker could not say).
    pub async fn committed_per_partition(&self, partitions: i32) -> Vec<i64> {
        let (brokers, group, topic) = (
            self.broker.bootstrap().to_string(),
            self.group.clone(),
            self.topic.clone(),
        );
        tokio::task::spawn_blocking(move || {
            kafka::committed_offsets(&brokers, &group, &topic, partitions)
        })
        .await
        .expect("task")
        .map(|offsets| offsets.into_iter().map(|o| o.unwrap_or(0)).collect())
        .unwrap_or_else(|_| vec![0; partitions as usize])
    }

    /// The group's committed offset for a partition, as the broker reports it.
    pub async fn committed(&self, partition: i32) -> Option<i64> {
        let (brokers, group, topic) = (
            self.broker.bootstrap().to_string(),
            self.group.clone(),
            self.topic.clone(),
        );
        tokio::task::spawn_blocking(move || {
            kafka::committed_offset(&brokers, &group, &topic, partition)
        })
        .await
        .expect("task")
        .expect("committed offsets")
    }

    /// Every record now in partition 0 of `topic`, read without a group.
    pub async fn read_partition(&self, topic: &str) -> Vec<ReadRecord> {
        self.read_topic(topic, 1).await.remove(0)
    }

    /// Every record now in each of the first `partitions` partitions of
    /// `topic`, read without a group.
    pub async fn read_topic(&self, topic: &str, partitions: i32) -> Vec<Vec<ReadRecord>> {
        let (brokers, topic) = (self.broker.bootstrap().to_string(), topic.to_string());
        tokio::task::spawn_blocking(move || {
            (0..partitions)
                .map(|p| read_partition(&brokers, &topic, p))
                .collect()
        })
        .await
        .expect("task")
    }
}

/// A record read back from a topic.
#[derive(Debug, Clone)]
pub struct ReadRecord {
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub payload: Vec<u8>,
}

impl ReadRecord {
    /// The value of the first header named `key`, as text.
    pub fn header(&self, key: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_deref())
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }
}

fn read_partition(brokers: &str, topic: &str, partition: i32) -> Vec<ReadRecord> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers, Message};
    let end = kafka::high_watermarks(brokers, topic, partition + 1).expect("watermarks")
        [partition as usize];
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "test-reader")
        .set("enable.auto.commit", "false")
        .create()
        .expect("reader");
    let mut assignment = rdkafka::TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, partition, rdkafka::Offset::Beginning)
        .expect("partition");
    consumer.assign(&assignment).expect("assign");
    let mut records = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while records.len() < usize::try_from(end).unwrap_or(0) {
        assert!(
            std::time::Instant::now() < deadline,
            "reading {topic} timed out"
        );
        let Some(polled) = consumer.poll(std::time::Duration::from_millis(200)) else {
            continue;
        };
        let m = polled.expect("a record");
        records.push(ReadRecord {
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            headers: m
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                        .collect()
                })
                .unwrap_or_default(),
            payload: m.payload().map(<[u8]>::to_vec).unwrap_or_default(),
        });
    }
    records
}
