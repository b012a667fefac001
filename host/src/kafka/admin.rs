use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::KafkaError;

use super::error::KafkaResult;
use rdkafka::ClientConfig;

/// How long the broker keeps a topic's records: `Ok(None)` for forever
/// (`retention.ms = -1`).
pub async fn topic_retention(brokers: &str, topic: &str) -> KafkaResult<Option<Duration>> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()?;
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
