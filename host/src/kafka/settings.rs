//! How the host joins its group: the member's settings and the librdkafka
//! configuration built from them (checked before any network traffic).

use std::time::Duration;

use rdkafka::ClientConfig;

use super::error::KafkaResult;
use super::IdSources;

/// How to join the group.
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    pub brokers: String,
    pub group: String,
    pub topics: Vec<String>,
    pub id_sources: IdSources,
    /// Extra librdkafka properties (`--kafka-opt key=value`), applied last. The
    /// properties in [`OWNED_PROPERTIES`] are refused by [`check_extra`].
    pub extra: Vec<(String, String)>,
    /// How long a rebalance waits for a revoked partition's worker to finish its
    /// batch and store its offset before handing the partition over anyway.
    pub revoke_grace: Duration,
}

/// How long a rebalance waits, by default, for a revoked partition's batch.
pub const DEFAULT_REVOKE_GRACE: Duration = Duration::from_secs(5);

/// How much longer than the grace a rebalance waits for a worker to let go:
/// a worker abandons its batch at the grace, and the margin lets its stored
/// offset land in the commit on revoke.
pub const REVOKE_MARGIN_MS: u64 = 1_000;

/// librdkafka properties the host sets itself because its guarantees rest on
/// them, with what to use instead.
pub const OWNED_PROPERTIES: &[(&str, &str)] = &[
    ("group.id", "--group"),
    ("bootstrap.servers", "--brokers"),
    (
        "enable.auto.commit",
        "nothing: offsets are committed after the database commit",
    ),
    (
        "enable.auto.offset.store",
        "nothing: offsets are stored after the database commit",
    ),
    (
        "isolation.level",
        "nothing: only committed records are read",
    ),
    ("enable.partition.eof", "nothing"),
];

/// Refuses `--kafka-opt` properties the host owns, naming what to use instead.
pub fn check_extra(extra: &[(String, String)]) -> Result<(), String> {
    let refused: Vec<String> = extra
        .iter()
        .filter_map(|(key, _)| {
            OWNED_PROPERTIES
                .iter()
                .find(|(owned, _)| owned == key)
                .map(|(owned, instead)| format!("{owned} (use {instead})"))
        })
        .collect();
    if refused.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "--kafka-opt cannot set {}: inbox-host sets it itself",
            refused.join(", ")
        ))
    }
}

/// Builds the member's librdkafka configuration without connecting: an unknown
/// property or a bad value is reported here, before any network traffic.
pub fn check_config(settings: &ConsumerSettings) -> KafkaResult<()> {
    client_config(settings).create_native_config()?;
    Ok(())
}

/// The librdkafka configuration of a group member.
pub fn client_config(settings: &ConsumerSettings) -> ClientConfig {
    let mut config = ClientConfig::new();
    let next_generation = settings
        .extra
        .iter()
        .any(|(k, v)| k == "group.protocol" && v == "consumer");
    config
        .set("bootstrap.servers", &settings.brokers)
        .set("group.id", &settings.group)
        // Offsets are stored by the workers after their database commit; librdkafka
        // commits what was stored every second, on revoke and on close.
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "1000")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        // The poll thread never stops polling (handling happens elsewhere), so this
        // bounds how long a lost JoinGroup reply leaves the member outside the
        // group (librdkafka waits max.poll.interval.ms + 3 s for it) and how long
        // the coordinator waits for members to rejoin a rebalance (more than the
        // revoke grace).
        .set("max.poll.interval.ms", MAX_POLL_INTERVAL_MS.to_string())
        // Each partition's high watermark, for lag (`/metrics`, stall checks).
        .set("statistics.interval.ms", "5000");
    if !next_generation {
        // KIP-848 (`group.protocol=consumer`) assigns on the broker and refuses
        // these client-side settings.
        config
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set("session.timeout.ms", SESSION_TIMEOUT_MS.to_string())
            .set("heartbeat.interval.ms", "1000");
    }
    for (key, value) in &settings.extra {
        config.set(key, value);
    }
    config
}

/// The group session timeout the host sets (classic protocol): Kafka's
/// smallest by default (`group.min.session.timeout.ms`), so a killed member's
/// partitions move soon; chosen by measurement (docs/deploy.md).
pub const SESSION_TIMEOUT_MS: u64 = 6_000;

/// `max.poll.interval.ms`: also the rebalance timeout, and with 3 s more how
/// long librdkafka waits for a JoinGroup reply before it asks again. The poll
/// thread never stops polling except in a revoke, which waits at most the
/// revoke grace (5 s).
pub const MAX_POLL_INTERVAL_MS: u64 = 10_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_the_host_relies_on_cannot_be_overridden_and_the_message_says_what_to_use() {
        let extra = |k: &str| vec![(k.to_string(), "x".to_string())];
        assert!(check_extra(&extra("security.protocol")).is_ok());
        let refused = check_extra(&extra("group.id")).expect_err("group.id is owned");
        assert!(refused.contains("group.id (use --group)"), "{refused}");
        assert!(check_extra(&extra("enable.auto.commit")).is_err());
        assert!(check_extra(&extra("enable.auto.offset.store")).is_err());
    }

    #[test]
    fn clients_for_tls_and_sasl_scram_plain_and_oauthbearer_can_be_built() {
        for (protocol, mechanism) in [
            ("ssl", None),
            ("sasl_ssl", Some("SCRAM-SHA-512")),
            ("sasl_ssl", Some("SCRAM-SHA-256")),
            ("sasl_ssl", Some("PLAIN")),
            ("sasl_plaintext", Some("SCRAM-SHA-256")),
            ("sasl_ssl", Some("OAUTHBEARER")),
        ] {
            let mut config = rdkafka::ClientConfig::new();
            config
                .set("bootstrap.servers", "127.0.0.1:1")
                .set("security.protocol", protocol);
            if let Some(mechanism) = mechanism {
                config
                    .set("sasl.mechanism", mechanism)
                    .set("sasl.username", "u")
                    .set("sasl.password", "p");
            }
            if mechanism == Some("OAUTHBEARER") {
                config.set("sasl.oauthbearer.config", "principal=u");
                config.set("enable.sasl.oauthbearer.unsecure.jwt", "true");
            }
            let built: Result<rdkafka::producer::BaseProducer, _> = config.create();
            assert!(built.is_ok(), "{protocol} {mechanism:?}: {:?}", built.err());
        }
    }

    #[test]
    fn the_next_generation_group_protocol_leaves_assignment_to_the_broker() {
        let mut settings = ConsumerSettings {
            brokers: "b:9092".into(),
            group: "g".into(),
            topics: vec!["t".into()],
            id_sources: IdSources::default(),
            extra: vec![],
            revoke_grace: DEFAULT_REVOKE_GRACE,
        };
        let classic = client_config(&settings);
        assert_eq!(
            classic.get("partition.assignment.strategy"),
            Some("cooperative-sticky")
        );
        settings.extra = vec![("group.protocol".into(), "consumer".into())];
        let kip848 = client_config(&settings);
        assert_eq!(kip848.get("partition.assignment.strategy"), None);
        assert_eq!(kip848.get("session.timeout.ms"), None);
        assert_eq!(kip848.get("enable.auto.offset.store"), Some("false"));
    }
}
