use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread;
use std::time::Duration;

use super::error::KafkaResult;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::Message as _;
use rdkafka::{ClientConfig, Offset};
use tokio::sync::mpsc;

use super::context::{GroupContext, MAX_POLL_INTERVAL_MS, SESSION_TIMEOUT_MS};
use super::partition::PartitionStream;
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

/// A member of the consumer group. Each partition assigned to it arrives from
/// [`Consumer::assigned`] as a [`PartitionStream`] of its own; a revoked
/// partition's stream ends after its worker finished. A thread of its own
/// serves the group (heartbeats, rebalances, commits), so handling records
/// never delays them.
pub struct Consumer {
    inner: Arc<BaseConsumer<GroupContext>>,
    assigned: mpsc::UnboundedReceiver<PartitionStream>,
    poller: Poller,
}

/// The thread serving the group; stopped (and joined) on drop.
struct Poller {
    polling: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.polling.store(false, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Consumer {
    pub fn join(settings: &ConsumerSettings) -> KafkaResult<Self> {
        let (streams, assigned) = mpsc::unbounded_channel();
        let context = GroupContext::new(settings, streams);
        let inner: Arc<BaseConsumer<GroupContext>> =
            Arc::new(client_config(settings).create_with_context(context)?);
        inner.context().attach(Arc::downgrade(&inner));
        let topics: Vec<&str> = settings.topics.iter().map(String::as_str).collect();
        inner.subscribe(&topics)?;
        let polling = Arc::new(AtomicBool::new(true));
        let thread = spawn_poller(
            Arc::downgrade(&inner),
            polling.clone(),
            settings.topics.clone(),
        )
        .map_err(|e| rdkafka::error::KafkaError::Subscription(e.to_string()))?;
        Ok(Self {
            inner,
            assigned,
            poller: Poller {
                polling,
                thread: Some(thread),
            },
        })
    }

    /// A handle on whether this member has joined its group and reaches the brokers.
    pub fn group_health(&self) -> GroupHealth {
        let context = self.inner.context();
        GroupHealth {
            failing: context.failing(),
            joined: context.joined(),
            outside: context.membership().outside.clone(),
        }
    }

    /// The next partition assigned to this member.
    pub async fn assigned(&mut self) -> Option<PartitionStream> {
        self.assigned.recv().await
    }

    /// Asks every partition stream to end (their workers finish the batch in hand).
    pub fn stop_partitions(&self) {
        self.inner.context().stop_all();
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

    /// Leaves the group: librdkafka commits every stored offset (a failure is
    /// logged: those records come again and the inbox finds them), then the
    /// partitions move at once. Blocks: call it off the async threads, after the
    /// partition workers have ended.
    pub fn close(self) {
        self.stop_partitions();
        // While the group is stable this lands; in a rebalance the broker refuses
        // it and the commit on unassign below tries again.
        if let Err(e) = self
            .inner
            .commit_consumer_state(rdkafka::consumer::CommitMode::Sync)
        {
            tracing::debug!(error = %e, "final commit before leaving");
        }
        drop(self.poller);
        drop(self.assigned);
        // The last reference: dropping closes the consumer, which revokes, commits
        // and leaves the group while serving the callbacks on this thread.
        drop(self.inner);
    }
}

/// Whether a member has joined its group and its brokers answer (see [`Consumer::group_health`]).
#[derive(Clone)]
pub struct GroupHealth {
    failing: Arc<AtomicBool>,
    joined: Arc<AtomicBool>,
    outside: Arc<AtomicBool>,
}

impl GroupHealth {
    pub fn brokers_reachable(&self) -> bool {
        !self.failing.load(Ordering::SeqCst)
    }

    /// Whether the group has assigned this member its partitions (none is an
    /// assignment too) at least once.
    pub fn joined(&self) -> bool {
        self.joined.load(Ordering::SeqCst)
    }

    /// Whether the member has been outside its group (or stuck joining) for
    /// longer than [`super::NOTICE_AFTER`] (it rejoins by itself if it lasts).
    pub fn outside_group(&self) -> bool {
        self.outside.load(Ordering::SeqCst)
    }
}

/// How often, while the brokers fail, the poll thread asks for metadata to learn
/// that they are back (an idle member would otherwise not notice).
const PROBE_EVERY: Duration = Duration::from_secs(5);

/// Serves the group's events until `polling` is cleared. Records never arrive
/// here: each partition's records go to its own stream.
fn spawn_poller(
    consumer: Weak<BaseConsumer<GroupContext>>,
    polling: Arc<AtomicBool>,
    topics: Vec<String>,
) -> std::io::Result<thread::JoinHandle<()>> {
    thread::Builder::new()
        .name("kafka-group".into())
        .spawn(move || {
            let mut probed = std::time::Instant::now();
            while polling.load(Ordering::SeqCst) {
                let Some(consumer) = consumer.upgrade() else {
                    return;
                };
                let failing = consumer.context().failing().load(Ordering::SeqCst);
                if failing && probed.elapsed() >= PROBE_EVERY {
                    probed = std::time::Instant::now();
                    if consumer
                        .fetch_metadata(None, Duration::from_secs(2))
                        .is_ok()
                    {
                        consumer.context().reachable_again();
                    }
                }
                match consumer.poll(Duration::from_millis(100)) {
                    None => {}
                    Some(Ok(m)) => tracing::error!(
                        topic = m.topic(),
                        partition = m.partition(),
                        offset = m.offset(),
                        "a record arrived outside its partition's stream; it is not handled \
                         here and comes again after the next rebalance or restart"
                    ),
                    Some(Err(e)) => consumer.context().client_error(&e),
                }
                if consumer.context().membership().take_rejoin() {
                    rejoin(&consumer, &topics);
                }
            }
        })
}

/// Leaves the group and joins it again (a member stuck outside it).
fn rejoin(consumer: &BaseConsumer<GroupContext>, topics: &[String]) {
    consumer.unsubscribe();
    let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
    if let Err(e) = consumer.subscribe(&topics) {
        tracing::warn!(error = %e, "could not join the group again; the next check retries");
    }
}

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
