use std::collections::{HashMap, HashSet};
use std::sync::{mpsc as sync_mpsc, Arc, Mutex, Weak};
use std::time::Duration;

use super::error::KafkaResult;
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::{watch, Notify};

use super::context::{Assignment, GroupContext, Partition};
use super::{IdSources, Record};

/// The records of one assigned partition, in offset order, for one worker.
///
/// It ends ([`PartitionStream::next`] returns `None`) when the partition is
/// revoked or the member closes; the rebalance waits for the stream to be
/// dropped, so the worker's last [`PartitionStream::store`] counts.
pub struct PartitionStream {
    partition: Partition,
    queue: PartitionQueue<GroupContext>,
    consumer: Arc<BaseConsumer<GroupContext>>,
    arrived: Arc<Notify>,
    signal: StopSignal,
    ids: Arc<IdSources>,
    warned_coordinates: Arc<Mutex<HashSet<String>>>,
    /// Dropped with the stream: tells a waiting rebalance the worker let go.
    _holding: sync_mpsc::SyncSender<()>,
    failing: bool,
    /// Whether this stream already reported ids taken from the coordinates.
    warned: bool,
}

impl PartitionStream {
    pub(super) fn new(
        assignment: Assignment,
        ids: Arc<IdSources>,
        warned_coordinates: Arc<Mutex<HashSet<String>>>,
    ) -> Self {
        let Assignment {
            partition,
            mut queue,
            consumer,
            stop,
            grace,
            holding,
        } = assignment;
        let arrived = Arc::new(Notify::new());
        let wake = arrived.clone();
        queue.set_nonempty_callback(move || wake.notify_one());
        Self {
            partition,
            queue,
            consumer,
            arrived,
            signal: StopSignal { stop, grace },
            ids,
            warned_coordinates,
            _holding: holding,
            failing: false,
            warned: false,
        }
    }

    pub fn topic(&self) -> &str {
        &self.partition.0
    }

    pub fn partition(&self) -> i32 {
        self.partition.1
    }

    /// A handle that reads this partition's high watermark, for lag.
    pub fn watermark(&self) -> Watermark {
        Watermark {
            known: Arc::downgrade(&self.consumer.context().high_watermarks()),
            partition: self.partition.clone(),
        }
    }

    /// A handle that tells when this partition stops, for work split off it
    /// (the key lanes of a partition).
    pub fn stop_signal(&self) -> StopSignal {
        self.signal.clone()
    }

    /// When the partition is revoked or the member closes, and the revoke
    /// grace after it.
    pub fn signal(&mut self) -> &mut StopSignal {
        &mut self.signal
    }

    /// The next record, waiting for one to arrive; `None` once stopped.
    pub async fn next(&mut self) -> Option<Record> {
        loop {
            if self.signal.is_stopped() {
                return None;
            }
            if let Some(record) = self.try_next() {
                return Some(record);
            }
            tokio::select! {
                () = self.arrived.notified() => {}
                _ = self.signal.stop.changed() => {}
            }
        }
    }

    /// The next record if one has already arrived.
    pub fn try_next(&mut self) -> Option<Record> {
        loop {
            match self.queue.poll(Duration::ZERO)? {
                Ok(m) => {
                    self.failing = false;
                    let record = Record::from_message(&m, &self.ids);
                    if record.id_from_coordinates && !self.warned {
                        self.warn_coordinates();
                    }
                    return Some(record);
                }
                // Fetch errors (a broker away, an offset out of range) are retried
                // by librdkafka; say so once per streak and keep reading.
                Err(e) => {
                    if !std::mem::replace(&mut self.failing, true) {
                        tracing::warn!(topic = self.topic(), partition = self.partition(), error = %e, "fetch error; librdkafka retries");
                    }
                }
            }
        }
    }

    /// Warns once per topic (across the member's partitions) that records carry
    /// no id of their own; the shared set is touched once per stream at most.
    fn warn_coordinates(&mut self) {
        self.warned = true;
        if super::poison::lock(&self.warned_coordinates).insert(self.topic().to_string()) {
            tracing::warn!(
                topic = self.topic(),
                "records carry no message id header or field; using topic:partition:offset, \
                 which changes when a message is republished (upstream duplicates will not be caught)"
            );
        }
    }

    /// Stores `offset + 1` as the partition's position: everything up to and
    /// including `offset` is done. It is committed soon after, asynchronously
    /// (and again every second, on revoke and on close). Fails once the
    /// partition is no longer assigned.
    pub fn store(&self, offset: i64) -> KafkaResult<()> {
        self.consumer
            .store_offset(self.topic(), self.partition(), offset)?;
        self.consumer.context().commit_soon(&self.consumer);
        Ok(())
    }

    /// Stores `offset + 1` and waits until the broker has committed that very
    /// offset (at-most-once commits before handling). The commit names the
    /// offset instead of "whatever is stored": an asynchronous commit after an
    /// earlier batch may already have taken the stored one.
    pub async fn store_and_commit(&self, offset: i64) -> KafkaResult<()> {
        self.consumer
            .store_offset(self.topic(), self.partition(), offset)?;
        let mut next = TopicPartitionList::new();
        next.add_partition_offset(self.topic(), self.partition(), Offset::Offset(offset + 1))?;
        let consumer = self.consumer.clone();
        let committed =
            tokio::task::spawn_blocking(move || consumer.commit(&next, CommitMode::Sync))
                .await
                .unwrap_or(Err(rdkafka::error::KafkaError::Canceled));
        Ok(committed?)
    }
}

/// Tells when a partition stops (revoked, or the member closing), and the
/// revoke grace after which a batch still running is abandoned.
#[derive(Clone)]
pub struct StopSignal {
    stop: watch::Receiver<bool>,
    grace: Duration,
}

impl StopSignal {
    /// Whether the partition was revoked or the member is closing.
    pub fn is_stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Resolves once the partition is revoked or the member is closing.
    pub async fn stopped(&mut self) {
        let _ = self.stop.wait_for(|stop| *stop).await;
    }

    /// Waits `delay`, or less if stopped first; returns whether it was stopped.
    pub async fn stopped_within(&mut self, delay: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(delay) => false,
            () = self.stopped() => true,
        }
    }

    /// Resolves the revoke grace after the stop: past it, a batch still
    /// running is to be abandoned.
    pub async fn past_grace(&mut self) {
        self.stopped().await;
        tokio::time::sleep(self.grace).await;
    }
}

/// Reads a partition's high watermark as librdkafka's statistics last reported
/// it (every 5 s; no broker round trip), so it is cheap enough for every scrape.
#[derive(Clone)]
pub struct Watermark {
    known: Weak<Mutex<HashMap<Partition, i64>>>,
    partition: Partition,
}

impl Watermark {
    /// The offset the next produced record will get; `None` before the first
    /// statistics or once the member is gone.
    pub fn high(&self) -> Option<i64> {
        let known = self.known.upgrade()?;
        let known = known.lock().unwrap_or_else(|e| e.into_inner());
        known.get(&self.partition).copied()
    }
}
