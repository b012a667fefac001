//! Calls beside the group: topics made and removed, a topic's retention, and
//! whether the brokers accept the host's credentials.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::connection::connection_config;
use super::error::KafkaResult;

/// How long the broker keeps a topic's records: `Ok(None)` for forever
/// (`retention.ms = -1`).
pub async fn topic_retention(
    brokers: &str,
    extra: &[(String, String)],
    topic: &str,
) -> KafkaResult<Option<Duration>> {
    let admin: AdminClient<DefaultClientContext> = connection_config(brokers, extra).create()?;
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .describe_configs(&[ResourceSpecifier::Topic(topic)], &options)
        .await?;
    let resource = results
        .into_iter()
        .next()
        .ok_or(KafkaError::AdminOpCreation(
            "no result for the topic".into(),
        ))?
        .map_err(KafkaError::AdminOp)?;
    let millis = resource
        .get("retention.ms")
        .and_then(|e| e.value.as_deref())
        .and_then(|v| v.parse::<i64>().ok())
        .ok_or(KafkaError::AdminOpCreation(
            "the broker did not report retention.ms".into(),
        ))?;
    Ok(u64::try_from(millis).ok().map(Duration::from_millis))
}

/// Creates `name` with `partitions` partitions and the brokers' default
/// replication (clusters that create topics on first use need none of this;
/// many production clusters do not). A topic that exists already is fine.
pub async fn create_topic(
    brokers: &str,
    extra: &[(String, String)],
    name: &str,
    partitions: i32,
) -> KafkaResult<()> {
    let admin: AdminClient<DefaultClientContext> = connection_config(brokers, extra).create()?;
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(-1));
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin.create_topics([&topic], &options).await? {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => return Err(KafkaError::AdminOp(code).into()),
        }
    }
    Ok(())
}

/// Deletes `names`; ones that do not exist are fine.
pub async fn delete_topics(
    brokers: &str,
    extra: &[(String, String)],
    names: &[&str],
) -> KafkaResult<()> {
    let admin: AdminClient<DefaultClientContext> = connection_config(brokers, extra).create()?;
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin.delete_topics(names, &options).await? {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
            Err((_, code)) => return Err(KafkaError::AdminOp(code).into()),
        }
    }
    Ok(())
}

/// Whether `extra` (`--kafka-opt`) asks for SASL.
pub fn uses_sasl(extra: &[(String, String)]) -> bool {
    extra.iter().any(|(key, value)| {
        key == "security.protocol" && value.to_ascii_lowercase().starts_with("sasl")
    })
}

/// Connects as the group member would and returns, within `timeout`, why the
/// brokers refused its credentials (`Ok(Some(reason))`), `Ok(None)` when they
/// accepted them or could not be reached (the host waits for them then). Blocks.
pub fn refused_credentials(
    brokers: &str,
    extra: &[(String, String)],
    timeout: Duration,
) -> KafkaResult<Option<String>> {
    let client: BaseConsumer<Refusals> =
        connection_config(brokers, extra).create_with_context(Refusals::default())?;
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if client
            .fetch_metadata(None, Duration::from_millis(500))
            .is_ok()
        {
            return Ok(None);
        }
        // Error events reach the context only while the client is polled.
        let _ = client.poll(Duration::from_millis(100));
        if let Some(reason) = super::poison::lock(&client.context().refused).clone() {
            return Ok(Some(reason));
        }
    }
    Ok(None)
}

/// Keeps the first authentication error librdkafka reports.
#[derive(Default)]
struct Refusals {
    refused: Mutex<Option<String>>,
}

impl ClientContext for Refusals {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Authentication) {
            super::poison::lock(&self.refused).get_or_insert_with(|| reason.to_string());
        }
    }
}

impl ConsumerContext for Refusals {}
