//! What each assigned partition is doing, for its lag, the records it holds for
//! retry and whether it has stalled: workers report, `/metrics` and
//! `/health/ready` read.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::kafka::{PartitionStream, Watermark};

/// The partitions this host works on now.
#[derive(Default)]
pub struct Partitions {
    tracked: Mutex<BTreeMap<(String, i32), Arc<PartitionProgress>>>,
}

/// One partition's progress, updated by its worker.
pub struct PartitionProgress {
    watermark: Watermark,
    /// The offset of the next record to handle; -1 until the first arrives.
    next: AtomicI64,
    last_progress: Mutex<Instant>,
    /// Failed attempts of the record the worker holds for retry (0: none).
    held_attempts: AtomicU32,
    /// Its worker ended abnormally: nothing handles it until it is assigned again.
    orphaned: AtomicBool,
    /// Its key lanes (`--key-lanes` above 1), set once by the dispatcher.
    lanes: OnceLock<Vec<Arc<LaneProgress>>>,
    /// Records dispatched to lanes past the watermark (what a crash now would
    /// deliver again).
    ahead: AtomicI64,
}

/// One key lane of a partition: whether a batch of it is running, and how
/// many of its records are waiting (the one running included).
#[derive(Default)]
pub struct LaneProgress {
    busy: AtomicBool,
    waiting: AtomicI64,
}

impl LaneProgress {
    pub fn set_busy(&self, busy: bool) {
        self.busy.store(busy, Ordering::Relaxed);
    }

    pub fn set_waiting(&self, records: usize) {
        self.waiting.store(
            i64::try_from(records).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
    }
}

/// A key lane as `/metrics` shows it.
pub struct LaneView {
    pub topic: String,
    pub partition: i32,
    pub lane: usize,
    pub busy: bool,
    pub waiting: i64,
}

/// A partition as `/metrics` shows it.
pub struct PartitionView {
    pub topic: String,
    pub partition: i32,
    /// Records produced and not yet handled (`None` until it can be told).
    pub lag: Option<i64>,
    pub held_attempts: u32,
    /// How long since the worker last finished a record (or started).
    pub since_progress: Duration,
}

/// Keeps a partition tracked while the worker holds it.
pub struct Tracked {
    partitions: Arc<Partitions>,
    key: (String, i32),
    pub progress: Arc<PartitionProgress>,
}

impl Drop for Tracked {
    /// A worker that lets go forgets its partition; one unwinding from a panic
    /// (every panic is caught inside it, so this is a last resort) leaves it
    /// reported as orphaned, which `/health/ready` shows until a new worker
    /// takes the partition.
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.progress.orphaned.store(true, Ordering::Relaxed);
        } else {
            self.partitions.lock().remove(&self.key);
        }
    }
}

impl Partitions {
    pub fn track(self: &Arc<Self>, stream: &PartitionStream) -> Tracked {
        let key = (stream.topic().to_string(), stream.partition());
        let progress = Arc::new(PartitionProgress {
            watermark: stream.watermark(),
            next: AtomicI64::new(-1),
            last_progress: Mutex::new(Instant::now()),
            held_attempts: AtomicU32::new(0),
            orphaned: AtomicBool::new(false),
            lanes: OnceLock::new(),
            ahead: AtomicI64::new(0),
        });
        self.lock().insert(key.clone(), progress.clone());
        Tracked {
            partitions: self.clone(),
            key,
            progress,
        }
    }

    pub fn views(&self) -> Vec<PartitionView> {
        self.lock()
            .iter()
            .map(|((topic, partition), p)| PartitionView {
                topic: topic.clone(),
                partition: *partition,
                lag: p.lag(),
                held_attempts: p.held_attempts.load(Ordering::Relaxed),
                since_progress: p.since_progress(),
            })
            .collect()
    }

    /// The key lanes of every partition split into lanes.
    pub fn lane_views(&self) -> Vec<LaneView> {
        let tracked = self.lock();
        let mut views = Vec::new();
        for ((topic, partition), p) in tracked.iter() {
            for (lane, l) in p.lanes.get().into_iter().flatten().enumerate() {
                views.push(LaneView {
                    topic: topic.clone(),
                    partition: *partition,
                    lane,
                    busy: l.busy.load(Ordering::Relaxed),
                    waiting: l.waiting.load(Ordering::Relaxed),
                });
            }
        }
        views
    }

    /// Per partition split into lanes, the records dispatched past its watermark.
    pub fn lanes_ahead(&self) -> Vec<((String, i32), i64)> {
        self.lock()
            .iter()
            .filter(|(_, p)| p.lanes.get().is_some())
            .map(|(key, p)| (key.clone(), p.ahead.load(Ordering::Relaxed)))
            .collect()
    }

    /// Partitions with records waiting that have not moved for `after`, and
    /// partitions whose worker ended abnormally.
    pub fn stalled(&self, after: Duration) -> Vec<String> {
        let orphaned: Vec<String> = self
            .lock()
            .iter()
            .filter(|(_, p)| p.orphaned.load(Ordering::Relaxed))
            .map(|((topic, partition), _)| {
                format!(
                    "partition {topic}-{partition} has no worker (it ended abnormally); \
                     it resumes when the partition is assigned again: restart the host"
                )
            })
            .collect();
        let stalled = self
            .views()
            .into_iter()
            .filter(|v| v.lag.is_some_and(|lag| lag > 0) && v.since_progress > after)
            .map(|v| {
                format!(
                    "partition {}-{} has records waiting and made no progress for {} s",
                    v.topic,
                    v.partition,
                    v.since_progress.as_secs()
                )
            });
        orphaned.into_iter().chain(stalled).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, i32), Arc<PartitionProgress>>> {
        self.tracked.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl PartitionProgress {
    /// A record at `offset` arrived (the first one tells where the worker starts).
    pub fn arrived(&self, offset: i64) {
        let _ = self
            .next
            .compare_exchange(-1, offset, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Splits the partition into `n` lanes; returns each lane's gauges.
    pub fn split(&self, n: usize) -> Vec<Arc<LaneProgress>> {
        self.lanes
            .get_or_init(|| (0..n).map(|_| Arc::default()).collect())
            .clone()
    }

    /// Records dispatched to lanes past the watermark.
    pub fn set_ahead(&self, records: i64) {
        self.ahead.store(records, Ordering::Relaxed);
    }

    /// Every record up to `offset` is done.
    pub fn done_through(&self, offset: i64) {
        self.next.fetch_max(offset + 1, Ordering::Relaxed);
        self.held_attempts.store(0, Ordering::Relaxed);
        *self
            .last_progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    /// The record at the head failed and is held for another attempt.
    pub fn holding(&self, attempts: u32) {
        self.held_attempts.store(attempts, Ordering::Relaxed);
    }

    fn lag(&self) -> Option<i64> {
        let next = self.next.load(Ordering::Relaxed);
        let high = self.watermark.high()?;
        (next >= 0).then(|| (high - next).max(0))
    }

    fn since_progress(&self) -> Duration {
        self.last_progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .elapsed()
    }
}
