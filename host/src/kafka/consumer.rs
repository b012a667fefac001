use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::Message as _;
use rdkafka::Offset;
use tokio::sync::mpsc;

use super::connection::connection_config;
use super::context::{Assignment, GroupContext};
use super::error::KafkaResult;
use super::membership::{spawn_describer, CoordinatorView};
use super::partition::PartitionStream;
use super::settings::{client_config, ConsumerSettings};
use super::IdSources;

/// A member of the consumer group. Each partition assigned to it arrives from
/// [`Consumer::assigned`] as a [`PartitionStream`] of its own; a revoked
/// partition's stream ends after its worker finished. A thread of its own
/// serves the group (heartbeats, rebalances, commits), so handling records
/// never delays them.
pub struct Consumer {
    inner: Arc<BaseConsumer<GroupContext>>,
    assigned: mpsc::UnboundedReceiver<Assignment>,
    ids: Arc<IdSources>,
    /// Topics already warned about ids taken from the coordinates.
    warned_coordinates: Arc<Mutex<HashSet<String>>>,
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
        let mut config = client_config(settings);
        let client_id = match config.get("client.id") {
            Some(id) => id.to_string(),
            None => member_client_id(&settings.group),
        };
        config.set("client.id", &client_id);
        let inner: Arc<BaseConsumer<GroupContext>> = Arc::new(config.create_with_context(context)?);
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
        spawn_describer(
            connection_config(&settings.brokers, &settings.extra),
            settings.group.clone(),
            client_id,
            inner.context().membership().coordinator.clone(),
            polling.clone(),
        )
        .map_err(|e| rdkafka::error::KafkaError::Subscription(e.to_string()))?;
        Ok(Self {
            inner,
            assigned,
            ids: Arc::new(settings.id_sources.clone()),
            warned_coordinates: Arc::default(),
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
            coordinator: context.membership().coordinator.clone(),
        }
    }

    /// The next partition assigned to this member.
    pub async fn assigned(&mut self) -> Option<PartitionStream> {
        let assignment = self.assigned.recv().await?;
        let (ids, warned) = (self.ids.clone(), self.warned_coordinates.clone());
        Some(PartitionStream::new(assignment, ids, warned))
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

/// How long leaving the group may take while the brokers answer: the final
/// commit and LeaveGroup, so the partitions move at once.
pub const LEAVE_WITHIN: Duration = Duration::from_secs(10);

/// How long while they do not: librdkafka would wait for a coordinator that
/// is not there (6 s and more, measured), and nothing it could do then lands.
pub const LEAVE_WITHIN_UNREACHABLE: Duration = Duration::from_secs(2);

impl Consumer {
    /// [`Consumer::close`] on a thread of its own, waited for at most
    /// [`LEAVE_WITHIN`] ([`LEAVE_WITHIN_UNREACHABLE`] while the brokers fail).
    /// Returns whether it finished. If not, the process goes on exiting without
    /// it: the records since the last commit come again to the partitions'
    /// next owner, which finds them in the inbox.
    pub async fn leave(self) -> bool {
        let reachable = !self.inner.context().failing().load(Ordering::SeqCst);
        let within = if reachable {
            LEAVE_WITHIN
        } else {
            LEAVE_WITHIN_UNREACHABLE
        };
        let (closed, done) = tokio::sync::oneshot::channel();
        let spawned = thread::Builder::new()
            .name("kafka-leave".into())
            .spawn(move || {
                self.close();
                let _ = closed.send(());
            });
        if spawned.is_err() {
            return false;
        }
        matches!(tokio::time::timeout(within, done).await, Ok(Ok(())))
    }
}

/// Whether a member has joined its group and its brokers answer (see [`Consumer::group_health`]).
#[derive(Clone)]
pub struct GroupHealth {
    failing: Arc<AtomicBool>,
    joined: Arc<AtomicBool>,
    outside: Arc<AtomicBool>,
    coordinator: Arc<CoordinatorView>,
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

    /// The group as its coordinator lists it (where the brokers answer
    /// DescribeGroups).
    pub fn coordinator(&self) -> &CoordinatorView {
        &self.coordinator
    }
}

/// A client id no other member of the group has (`inbox-host-<group>-<pid>-<n>`,
/// unless `--kafka-opt client.id=` names one): the coordinator lists members by
/// it, so this member can find itself in the list.
fn member_client_id(group: &str) -> String {
    static MEMBERS: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "inbox-host-{group}-{}-{nanos:x}-{}",
        std::process::id(),
        MEMBERS.fetch_add(1, Ordering::SeqCst)
    )
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
