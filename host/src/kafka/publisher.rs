//! A long-lived producer for records the host itself publishes (dead letters,
//! redrives): idempotent, `acks=all`, with the connection settings of the
//! group member (TLS, SASL) and nothing of its consumer settings.

use std::time::Duration;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;

use super::error::KafkaResult;

/// `--kafka-opt` properties that concern the connection, passed to the
/// producer too (consumer properties would only draw librdkafka warnings).
const CONNECTION_PREFIXES: &[&str] = &[
    "security.",
    "ssl.",
    "ssl_",
    "sasl.",
    "enable.sasl.",
    "client.",
    "socket.",
    "broker.",
    "metadata.",
    "reconnect.",
    "resolve.",
    "api.version",
    "debug",
];

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
    pub payload: &'a [u8],
}

/// The producer; cheap to share by reference.
pub struct Publisher {
    producer: FutureProducer,
}

impl Publisher {
    /// A producer for `brokers` with the connection properties of `extra`
    /// (`--kafka-opt`). Builds the configuration without connecting.
    pub fn new(brokers: &str, extra: &[(String, String)]) -> KafkaResult<Self> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "0")
            .set(
                "message.timeout.ms",
                DELIVERY_TIMEOUT.as_millis().to_string(),
            );
        for (key, value) in extra {
            if CONNECTION_PREFIXES.iter().any(|p| key.starts_with(p)) {
                config.set(key, value);
            }
        }
        Ok(Self {
            producer: config.create()?,
        })
    }

    /// Publishes one record and waits until the brokers acknowledged it;
    /// returns where it landed (partition, offset).
    pub async fn publish(&self, record: &Publication<'_>) -> KafkaResult<(i32, i64)> {
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
        for (key, value) in record.headers {
            headers = headers.insert(Header { key, value: *value });
        }
        let mut outgoing = FutureRecord::<[u8], [u8]>::to(record.topic)
            .payload(record.payload)
            .headers(headers);
        if let Some(key) = record.key {
            outgoing = outgoing.key(key);
        }
        match self.producer.send(outgoing, DELIVERY_TIMEOUT).await {
            Ok(delivery) => Ok((delivery.partition, delivery.offset)),
            Err((e, _)) => Err(e.into()),
        }
    }
}
