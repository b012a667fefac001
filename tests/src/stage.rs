//! A database, a broker with a fresh topic, and real `inbox-host` processes
//! consuming it: the stage of the end-to-end tests and benchmarks.

use inbox_host::embedded::LocalBroker;
use inbox_host::kafka::{self, OutgoingRecord};

use crate::host::Host;
use crate::{unique, TestDb};

pub struct Stage {
    pub db: TestDb,
    pub broker: LocalBroker,
    pub topic: String,
    pub group: String,
}

impl Stage {
    pub async fn new(partitions: i32) -> Self {
        let db = TestDb::start().await;
        let broker = LocalBroker::start().expect("local broker");
        let topic = unique("orders");
        broker.create_topic(&topic, partitions).expect("topic");
        Self {
            db,
            broker,
            topic,
            group: unique("billing"),
        }
    }

    /// Brokers, topic and database come from the environment, so the host's
    /// command line is the README's: `--plugin <file> --group <group>`. It
    /// serves its status endpoint (on a free port unless `extra` names one), so
    /// tests wait on `/metrics` and `/health/ready` rather than on log lines.
    pub fn spawn_host(&self, plugin: &std::path::Path, extra: &[&str]) -> Host {
        let plugin = plugin.to_str().expect("utf-8 path");
        let status = crate::host::free_addr();
        let mut args = vec!["--plugin", plugin, "--group", &self.group];
        if !extra.contains(&"--status-addr") {
            args.extend(["--status-addr", status.as_str()]);
        }
        args.extend_from_slice(extra);
        Host::spawn(
            &args,
            &[
                ("KAFKA_BROKERS", self.broker.bootstrap()),
                ("INBOX_TOPIC", &self.topic),
                ("DATABASE_URL", &self.db.url),
                ("INBOX_RETRY_INITIAL_MS", "50"),
                ("INBOX_RETRY_MAX_MS", "500"),
            ],
        )
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
}
