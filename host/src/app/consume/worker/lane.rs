//! One key lane of a partition, as its worker sees it: the records the
//! dispatcher (`lanes/`) sends it, in offset order, and the partition's stop
//! signal; what it stores goes back to the dispatcher, which stores the
//! watermark.

use std::sync::Arc;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use crate::app::observe::LaneProgress;
use crate::kafka::{Record, StopSignal};

/// A lane's report: its records up to this offset are done.
pub(in crate::app::consume) struct Done {
    pub lane: usize,
    pub offset: i64,
}

pub(in crate::app::consume) struct Lane {
    topic: String,
    partition: i32,
    index: usize,
    records: UnboundedReceiver<Record>,
    signal: StopSignal,
    done: UnboundedSender<Done>,
    progress: Option<Arc<LaneProgress>>,
}

/// Where a lane's records come from and where its reports go.
pub(in crate::app::consume) struct LaneWiring {
    pub index: usize,
    pub records: UnboundedReceiver<Record>,
    pub signal: StopSignal,
    pub done: UnboundedSender<Done>,
    pub progress: Option<Arc<LaneProgress>>,
}

impl Lane {
    pub fn new(topic: &str, partition: i32, wiring: LaneWiring) -> Self {
        let LaneWiring {
            index,
            records,
            signal,
            done,
            progress,
        } = wiring;
        Self {
            topic: topic.to_string(),
            partition,
            index,
            records,
            signal,
            done,
            progress,
        }
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn partition(&self) -> i32 {
        self.partition
    }

    pub fn signal(&mut self) -> &mut StopSignal {
        &mut self.signal
    }

    /// The next record, waiting for one; `None` once the partition stopped.
    pub async fn next(&mut self) -> Option<Record> {
        if self.signal.is_stopped() {
            return None;
        }
        tokio::select! {
            record = self.records.recv() => record,
            () = self.signal.stopped() => None,
        }
    }

    pub fn try_next(&mut self) -> Option<Record> {
        self.records.try_recv().ok()
    }

    /// This lane's records up to `offset` are done.
    pub fn store(&self, offset: i64) {
        let _ = self.done.send(Done {
            lane: self.index,
            offset,
        });
    }

    /// A batch of this lane started (`true`) or ended.
    pub fn running(&self, busy: bool) {
        if let Some(progress) = &self.progress {
            progress.set_busy(busy);
        }
    }
}
