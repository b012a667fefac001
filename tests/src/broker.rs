//! The broker a test runs against: librdkafka's mock cluster started for it, or
//! a Kafka-protocol server already running whose address `TEST_KAFKA_BROKERS`
//! names (as `DATABASE_URL` names a PostgreSQL): `scripts/compat` runs a subset
//! of the end-to-end tests against another broker that way.

use std::time::{Duration, Instant};

use anyhow::Context;
use inbox_host::embedded::LocalBroker;
use inbox_host::kafka;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;

/// The address of a running broker for the tests, instead of the mock cluster.
pub const BROKERS_VAR: &str = "TEST_KAFKA_BROKERS";

pub enum TestBroker {
    Local(LocalBroker),
    /// A broker the test did not start: topics are created through the admin
    /// API, and it cannot be taken down.
    Running(String),
}

impl TestBroker {
    /// The broker `TEST_KAFKA_BROKERS` names, or a mock cluster of the test's own.
    pub fn start() -> Self {
        match running_brokers() {
            Some(bootstrap) => Self::Running(bootstrap),
            None => Self::Local(LocalBroker::start().expect("local broker")),
        }
    }

    /// Whether this is librdkafka's mock cluster (not a broker `TEST_KAFKA_BROKERS` names).
    pub fn is_local(&self) -> bool {
        matches!(self, Self::Local(_))
    }

    pub fn bootstrap(&self) -> &str {
        match self {
            Self::Local(broker) => broker.bootstrap(),
            Self::Running(bootstrap) => bootstrap,
        }
    }

    /// Creates `name` and, on a running broker, waits until its metadata lists
    /// every partition.
    pub async fn create_topic(&self, name: &str, partitions: i32) -> anyhow::Result<()> {
        match self {
            Self::Local(broker) => broker.create_topic(name, partitions),
            Self::Running(bootstrap) => create_topic_with(bootstrap, &[], name, partitions).await,
        }
    }

    /// Takes the broker down or back up: only the mock cluster can.
    pub fn set_down(&self, down: bool) -> anyhow::Result<()> {
        self.local()?.set_down(down)
    }

    /// Makes `topic` unavailable or available again: only the mock cluster can.
    pub fn set_topic_available(&self, topic: &str, available: bool) -> anyhow::Result<()> {
        self.local()?.set_topic_available(topic, available)
    }

    fn local(&self) -> anyhow::Result<&LocalBroker> {
        match self {
            Self::Local(broker) => Ok(broker),
            Self::Running(_) => {
                anyhow::bail!("this test needs the mock cluster: unset {BROKERS_VAR}")
            }
        }
    }
}

/// `TEST_KAFKA_BROKERS`, when set and not empty.
pub fn running_brokers() -> Option<String> {
    std::env::var(BROKERS_VAR).ok().filter(|b| !b.is_empty())
}

/// Creates a topic through the host's admin call on the brokers at
/// `bootstrap`, with `options` (SASL) for the connection, and waits until their
/// metadata lists every partition.
pub async fn create_topic_with(
    bootstrap: &str,
    options: &[(String, String)],
    name: &str,
    partitions: i32,
) -> anyhow::Result<()> {
    kafka::create_topic(bootstrap, options, name, partitions)
        .await
        .with_context(|| format!("creating topic {name}"))?;
    let (bootstrap, name, options) = (bootstrap.to_string(), name.to_string(), options.to_vec());
    tokio::task::spawn_blocking(move || {
        wait_for_partitions(&bootstrap, &options, &name, partitions)
    })
    .await?
}

/// Waits (30 s at most) until the brokers' metadata lists `partitions`
/// partitions of `topic`, each with a leader.
fn wait_for_partitions(
    bootstrap: &str,
    options: &[(String, String)],
    topic: &str,
    partitions: i32,
) -> anyhow::Result<()> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    for (key, value) in options {
        config.set(key, value);
    }
    let client: BaseConsumer = config.create()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metadata = client
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .context("reading metadata")?;
        let ready = metadata.topics().iter().any(|t| {
            t.name() == topic
                && t.error().is_none()
                && t.partitions().len() == partitions as usize
                && t.partitions().iter().all(|p| p.leader() >= 0)
        });
        if ready {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "topic {topic} did not appear with {partitions} partitions within 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A broker that requires SASL, with a user made on it: named by
/// `TEST_KAFKA_SASL_BROKERS`, `TEST_KAFKA_SASL_USER` and
/// `TEST_KAFKA_SASL_PASSWORD` (`scripts/compat` sets them).
pub struct SaslBroker {
    pub bootstrap: String,
    pub user: String,
    pub password: String,
}

impl SaslBroker {
    pub fn from_env() -> Self {
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| {
                panic!(
                    "{name} is not set: this test runs against a broker with SASL (scripts/compat)"
                )
            })
        };
        Self {
            bootstrap: var("TEST_KAFKA_SASL_BROKERS"),
            user: var("TEST_KAFKA_SASL_USER"),
            password: var("TEST_KAFKA_SASL_PASSWORD"),
        }
    }

    /// The librdkafka properties of a client logging in with `mechanism` and
    /// `password`.
    pub fn login(&self, mechanism: &str, password: &str) -> Vec<(String, String)> {
        vec![
            ("security.protocol".into(), "SASL_PLAINTEXT".into()),
            ("sasl.mechanism".into(), mechanism.into()),
            ("sasl.username".into(), self.user.clone()),
            ("sasl.password".into(), password.into()),
        ]
    }
}
