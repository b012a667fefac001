//! Where a worker's records come from: a whole partition, or one key lane of
//! it (`--key-lanes`). The worker reads both alike.

use super::lane::Lane;
use crate::kafka::{KafkaError, PartitionStream, Record, StopSignal};

pub(in crate::app::consume) enum Feed {
    Partition(PartitionStream),
    Lane(Lane),
}

impl Feed {
    pub fn topic(&self) -> &str {
        match self {
            Feed::Partition(s) => s.topic(),
            Feed::Lane(l) => l.topic(),
        }
    }

    pub fn partition(&self) -> i32 {
        match self {
            Feed::Partition(s) => s.partition(),
            Feed::Lane(l) => l.partition(),
        }
    }

    /// The partition's stop signal (a lane shares its partition's).
    pub fn signal(&mut self) -> &mut StopSignal {
        match self {
            Feed::Partition(s) => s.signal(),
            Feed::Lane(l) => l.signal(),
        }
    }

    pub async fn next(&mut self) -> Option<Record> {
        match self {
            Feed::Partition(s) => s.next().await,
            Feed::Lane(l) => l.next().await,
        }
    }

    pub fn try_next(&mut self) -> Option<Record> {
        match self {
            Feed::Partition(s) => s.try_next(),
            Feed::Lane(l) => l.try_next(),
        }
    }

    /// Everything up to `offset` is done: stored as the partition's position,
    /// or for a lane, reported to the partition's watermark.
    pub fn store(&self, offset: i64) -> Result<(), KafkaError> {
        match self {
            Feed::Partition(s) => s.store(offset),
            Feed::Lane(l) => {
                l.store(offset);
                Ok(())
            }
        }
    }

    /// Commits before handling (at-most-once, which lanes refuse at start).
    pub async fn store_and_commit(&self, offset: i64) -> Result<(), KafkaError> {
        match self {
            Feed::Partition(s) => s.store_and_commit(offset).await,
            Feed::Lane(_) => unreachable!("at-most-once is refused with --key-lanes above 1"),
        }
    }

    /// A batch started (`true`) or ended, for a lane's metrics.
    pub fn running(&self, busy: bool) {
        if let Feed::Lane(l) = self {
            l.running(busy);
        }
    }
}
