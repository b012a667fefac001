//! The connection half of the member's settings (brokers, TLS, SASL), for the
//! host's other clients: producers, admin calls, the credentials check and the
//! coordinator's list of members.

use rdkafka::ClientConfig;

/// `--kafka-opt` properties that concern the connection, passed to the host's
/// other clients too (consumer properties would only draw librdkafka warnings).
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

/// A configuration reaching `brokers` as the group member does, with the
/// connection properties of `extra` (`--kafka-opt`) and nothing else of it.
pub fn connection_config(brokers: &str, extra: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    for (key, value) in extra {
        if CONNECTION_PREFIXES.iter().any(|p| key.starts_with(p)) {
            config.set(key, value);
        }
    }
    config
}
