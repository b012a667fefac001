use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as sync_mpsc, Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::{ClientContext, TopicPartitionList};
use tokio::sync::{mpsc, watch};

use super::membership::Membership;
use super::poison::lock;
use super::settings::ConsumerSettings;

/// A topic and partition.
pub(super) type Partition = (String, i32);

/// A partition just assigned: its own queue, split off the consumer, and the
/// two ends of its handoff (the consumer makes a [`super::PartitionStream`] of it).
pub(super) struct Assignment {
    pub partition: Partition,
    pub queue: PartitionQueue<GroupContext>,
    pub consumer: Arc<BaseConsumer<GroupContext>>,
    pub stop: watch::Receiver<bool>,
    /// How long the worker's batch may go on once stopped.
    pub grace: Duration,
    /// Dropped when the worker lets go of the partition.
    pub holding: sync_mpsc::SyncSender<()>,
}

/// What a rebalance needs to take a partition back from its worker: a way to
/// ask it to stop, and a channel that disconnects once the worker has let go.
struct Handoff {
    stop: watch::Sender<bool>,
    released: sync_mpsc::Receiver<()>,
}

/// Turns rebalances into partition streams: an assigned partition gets its own
/// queue (split off before librdkafka starts fetching it) and is handed to the
/// application; a revoked one is taken back only after its worker finished the
/// batch in hand and stored its offset, so librdkafka commits that offset as it
/// unassigns the partition.
pub(super) struct GroupContext {
    consumer: OnceLock<Weak<BaseConsumer<GroupContext>>>,
    assignments: mpsc::UnboundedSender<Assignment>,
    handoffs: Mutex<HashMap<Partition, Handoff>>,
    revoke_grace: Duration,
    commits_failing: AtomicBool,
    client_failing: Arc<AtomicBool>,
    /// Set at the first assignment: the member has joined its group.
    joined: Arc<AtomicBool>,
    /// Each partition's high watermark, from librdkafka's statistics.
    high_watermarks: Arc<Mutex<HashMap<Partition, i64>>>,
    last_commit: Mutex<Instant>,
    membership: Arc<Membership>,
}

/// Least time between two commits asked for after batches; librdkafka's own
/// auto commit (every second) and the commits on revoke and close come on top.
const COMMIT_SPACING: Duration = Duration::from_millis(100);

impl GroupContext {
    pub fn new(
        settings: &ConsumerSettings,
        assignments: mpsc::UnboundedSender<Assignment>,
    ) -> Self {
        Self {
            consumer: OnceLock::new(),
            assignments,
            handoffs: Mutex::new(HashMap::new()),
            revoke_grace: settings.revoke_grace,
            commits_failing: AtomicBool::new(false),
            client_failing: Arc::new(AtomicBool::new(false)),
            joined: Arc::new(AtomicBool::new(false)),
            high_watermarks: Arc::default(),
            last_commit: Mutex::new(Instant::now()),
            membership: Arc::default(),
        }
    }

    /// Gives the context the consumer it serves (partition queues are split
    /// from the shared handle).
    pub fn attach(&self, consumer: Weak<BaseConsumer<GroupContext>>) {
        let _ = self.consumer.set(consumer);
    }

    /// Asks every partition's worker to stop.
    pub fn stop_all(&self) {
        for handoff in lock(&self.handoffs).values() {
            let _ = handoff.stop.send(true);
        }
    }

    /// Whether the last word from the brokers was an error (cleared by a
    /// successful commit or metadata request).
    pub fn failing(&self) -> Arc<AtomicBool> {
        self.client_failing.clone()
    }

    pub fn joined(&self) -> Arc<AtomicBool> {
        self.joined.clone()
    }

    pub fn membership(&self) -> &Arc<Membership> {
        &self.membership
    }

    pub fn high_watermarks(&self) -> Arc<Mutex<HashMap<Partition, i64>>> {
        self.high_watermarks.clone()
    }

    /// The brokers answered again after errors.
    pub fn reachable_again(&self) {
        if self.client_failing.swap(false, Ordering::SeqCst) {
            tracing::info!("Kafka reachable again");
        }
    }

    /// An error from the group's poll: logged once per streak, never fatal.
    pub fn client_error(&self, error: &KafkaError) {
        ClientContext::error(self, error.clone(), "poll");
    }

    /// Commits the stored offsets soon after a batch (asynchronously, at most
    /// every [`COMMIT_SPACING`]), so a rebalance or a crash replays little.
    pub fn commit_soon(&self, consumer: &BaseConsumer<GroupContext>) {
        {
            let mut last = lock(&self.last_commit);
            if last.elapsed() < COMMIT_SPACING {
                return;
            }
            *last = Instant::now();
        }
        if let Err(e) = consumer.commit_consumer_state(CommitMode::Async) {
            tracing::debug!(error = %e, "asking for an offset commit failed; the next one carries it");
        }
    }

    fn assign(&self, tpl: &TopicPartitionList) {
        let Some(consumer) = self.consumer.get().and_then(Weak::upgrade) else {
            return;
        };
        let mut handoffs = lock(&self.handoffs);
        for element in tpl.elements() {
            let (topic, partition) = (element.topic().to_string(), element.partition());
            let Some(queue) = consumer.split_partition_queue(&topic, partition) else {
                tracing::error!(topic, partition, "cannot open the partition's queue");
                continue;
            };
            let (stop, stopped) = watch::channel(false);
            let (holding, released) = sync_mpsc::sync_channel(0);
            let assignment = Assignment {
                partition: (topic.clone(), partition),
                queue,
                consumer: consumer.clone(),
                stop: stopped,
                grace: self.revoke_grace,
                holding,
            };
            handoffs.insert((topic, partition), Handoff { stop, released });
            let _ = self.assignments.send(assignment);
        }
    }

    fn revoke(&self, tpl: &TopicPartitionList) {
        let revoked: Vec<Handoff> = {
            let mut handoffs = lock(&self.handoffs);
            partitions(tpl)
                .iter()
                .filter_map(|p| handoffs.remove(p))
                .collect()
        };
        for handoff in &revoked {
            let _ = handoff.stop.send(true);
        }
        let deadline =
            Instant::now() + self.revoke_grace + Duration::from_millis(super::REVOKE_MARGIN_MS);
        let mut late = 0;
        for handoff in revoked {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(sync_mpsc::RecvTimeoutError::Timeout) = handoff.released.recv_timeout(left) {
                late += 1;
            }
        }
        if late > 0 {
            tracing::warn!(
                late,
                grace_ms = self.revoke_grace.as_millis() as u64,
                "revoked partitions handed over before their workers let go; their last records come again and the inbox finds those already handled"
            );
        }
    }
}

impl ClientContext for GroupContext {
    fn stats(&self, statistics: rdkafka::Statistics) {
        if let Some(group) = &statistics.cgrp {
            let reachable = !self.client_failing.load(Ordering::SeqCst);
            self.membership
                .observe(&group.state, &group.join_state, reachable);
        }
        let mut high = self
            .high_watermarks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for (topic, t) in &statistics.topics {
            for (partition, p) in &t.partitions {
                if *partition >= 0 && p.hi_offset >= 0 {
                    high.insert((topic.clone(), *partition), p.hi_offset);
                }
            }
        }
    }

    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        use RDKafkaLogLevel::*;
        match level {
            // Each refused commit; `commit_callback` says it once per streak.
            Warning if facility == "COMMITFAIL" => {
                tracing::debug!(target: "librdkafka", "{facility} {message}")
            }
            Emerg | Alert | Critical | Error => {
                tracing::error!(target: "librdkafka", "{facility} {message}")
            }
            Warning => tracing::warn!(target: "librdkafka", "{facility} {message}"),
            Notice | Info => tracing::info!(target: "librdkafka", "{facility} {message}"),
            Debug => tracing::debug!(target: "librdkafka", "{facility} {message}"),
        }
    }

    /// A broker away, all brokers down, a failed resolve: librdkafka retries;
    /// the host says so once per streak and never exits over it.
    fn error(&self, error: KafkaError, reason: &str) {
        let first = !self.client_failing.swap(true, Ordering::SeqCst);
        if error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::Authentication) {
            // Checked at start; a password changed since then shows here.
            tracing::error!(error = %error, reason, "the brokers refused this host's SASL credentials; librdkafka keeps retrying until they accept them");
        } else if first {
            tracing::warn!(error = %error, reason, "Kafka client error; librdkafka keeps retrying (logged once until a commit succeeds)");
        } else {
            tracing::debug!(error = %error, reason, "Kafka client error");
        }
    }
}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => self.assign(tpl),
            Rebalance::Revoke(tpl) => {
                tracing::info!(partitions = ?partitions(tpl), "partitions revoked; finishing their batches");
                self.revoke(tpl);
            }
            Rebalance::Error(e) => {
                tracing::warn!(error = %e, "rebalance error; the group will retry")
            }
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            self.joined.store(true, Ordering::SeqCst);
            tracing::info!(partitions = ?partitions(tpl), "partitions assigned");
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, _offsets: &TopicPartitionList) {
        match result {
            Ok(()) => {
                self.reachable_again();
                if self.commits_failing.swap(false, Ordering::SeqCst) {
                    tracing::info!("offset commits succeed again");
                }
            }
            // Nothing to commit is not a failure.
            Err(KafkaError::ConsumerCommit(rdkafka::types::RDKafkaErrorCode::NoOffset)) => {}
            Err(e) => {
                if !self.commits_failing.swap(true, Ordering::SeqCst) {
                    tracing::warn!(error = %e, "offset commit failed; retried with the next one (those records may come again and the inbox finds them)");
                }
            }
        }
    }
}

fn partitions(tpl: &TopicPartitionList) -> Vec<Partition> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect()
}
