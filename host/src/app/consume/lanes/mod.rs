//! Key lanes (`--key-lanes N`, DESIGN.md §13): a partition's records are
//! dispatched by a stable hash of their key to N lanes, each a worker of its
//! own (batches in its own transactions, in offset order within the lane), so
//! one key's records never run at once or out of order while other keys go
//! on. The partition's stored offset is the contiguous watermark: the record
//! before the lowest one not done. A crash or a rebalance delivers again what
//! lies above it, and the inbox finds what was done.

mod watermark;

use std::sync::Arc;

use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tokio::task::JoinSet;

use watermark::Open;

use super::source::HandlerSource;
use super::worker::{Done, Lane, LaneWiring, Shared, Worker};
use crate::app::observe::{LaneProgress, Tracked};
use crate::kafka::{PartitionStream, Record};

/// Which lane a record goes to: FNV-1a (64 bit) of its key, so a key's lane
/// is the same on every host and every version; a record without a key has
/// no order to keep but its partition's, and goes by its offset.
pub fn lane_of(key: Option<&[u8]>, offset: i64, lanes: usize) -> usize {
    let lanes = lanes.max(1) as u64;
    let spread = match key {
        Some(key) => key.iter().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
        }),
        None => offset.unsigned_abs(),
    };
    (spread % lanes) as usize
}

/// Runs one partition as `--key-lanes` lanes until it is revoked or the member
/// closes; drops the stream (letting the rebalance go on) only after every
/// lane has ended and its last done records are stored.
pub(super) async fn run<S: HandlerSource>(stream: PartitionStream, shared: Arc<Shared<S>>) {
    let lanes = shared.limits.key_lanes.max(1);
    let lookahead = i64::try_from(shared.limits.lane_lookahead.max(lanes)).unwrap_or(i64::MAX);
    let tracked = shared
        .metrics
        .as_ref()
        .map(|m| m.partitions().track(&stream));
    let gauges = tracked
        .as_ref()
        .map_or_else(Vec::new, |t| t.progress.split(lanes));
    let (done_tx, mut done_rx) = unbounded_channel();
    let mut senders = Vec::with_capacity(lanes);
    let mut workers = JoinSet::new();
    for index in 0..lanes {
        let (records, received) = unbounded_channel();
        senders.push(records);
        let wiring = LaneWiring {
            index,
            records: received,
            signal: stream.stop_signal(),
            done: done_tx.clone(),
            progress: gauges.get(index).cloned(),
        };
        let lane = Lane::new(stream.topic(), stream.partition(), wiring);
        workers.spawn(Worker::for_lane(lane, shared.clone()).run());
    }
    drop(done_tx);
    let mut signal = stream.stop_signal();
    let mut partition = Dispatcher {
        stream,
        senders,
        open: Open::new(lanes),
        tracked,
        gauges,
    };
    loop {
        tokio::select! {
            biased;
            Some(done) = done_rx.recv() => partition.settle(done),
            record = partition.stream.next(), if partition.open.ahead() < lookahead => {
                let Some(record) = record else { break };
                partition.dispatch(record);
            }
            () = signal.stopped(), if partition.open.ahead() >= lookahead => break,
        }
    }
    // Stopped: each lane ends its batch (or abandons it past the revoke
    // grace) and reports what it finished; the channel closes once every lane
    // has ended.
    while let Some(done) = done_rx.recv().await {
        partition.settle(done);
    }
    while workers.join_next().await.is_some() {}
}

/// One partition's side of its lanes: what it sent where, and its watermark.
struct Dispatcher {
    stream: PartitionStream,
    senders: Vec<UnboundedSender<Record>>,
    open: Open,
    tracked: Option<Tracked>,
    /// Each lane's gauges (none without metrics).
    gauges: Vec<Arc<LaneProgress>>,
}

impl Dispatcher {
    /// Sends a record to its key's lane.
    fn dispatch(&mut self, record: Record) {
        let lane = lane_of(record.key.as_deref(), record.offset, self.senders.len());
        if let Some(tracked) = &self.tracked {
            tracked.progress.arrived(record.offset);
        }
        self.open.dispatched(lane, record.offset);
        self.gauge_waiting(lane);
        let _ = self.senders[lane].send(record);
    }

    /// A lane's records up to an offset are done: stores the watermark if it moved.
    fn settle(&mut self, done: Done) {
        let moved = self.open.done(done.lane, done.offset);
        self.gauge_waiting(done.lane);
        if let Some(tracked) = &self.tracked {
            tracked.progress.set_ahead(self.open.ahead());
        }
        let Some(through) = moved else {
            return;
        };
        if let Some(tracked) = &self.tracked {
            tracked.progress.done_through(through);
        }
        if let Err(e) = self.stream.store(through) {
            // The partition moved: its next owner starts from the last commit
            // and finds these records in the inbox.
            tracing::debug!(error = %e, offset = through, "offset not stored: partition no longer assigned");
        }
    }

    fn gauge_waiting(&self, lane: usize) {
        if let Some(gauge) = self.gauges.get(lane) {
            gauge.set_waiting(self.open.waiting(lane));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::lane_of;

    #[test]
    fn a_key_always_takes_the_same_lane_and_keys_spread_over_all_lanes() {
        let lane = lane_of(Some(b"customer-7"), 0, 16);
        assert_eq!(lane_of(Some(b"customer-7"), 99, 16), lane);
        let used: std::collections::HashSet<usize> = (0..200)
            .map(|i| lane_of(Some(format!("customer-{i}").as_bytes()), 0, 16))
            .collect();
        assert_eq!(used.len(), 16);
        assert_eq!(lane_of(Some(b"anything"), 5, 1), 0);
    }

    #[test]
    fn a_record_without_a_key_goes_by_its_offset() {
        assert_eq!(lane_of(None, 9, 4), 1);
        assert_eq!(lane_of(None, 12, 4), 0);
    }
}
