use std::collections::HashMap;
use std::sync::Mutex;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaResult;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

/// A topic and partition.
pub(super) type Partition = (String, i32);

/// Remembers acknowledged offsets so they are committed before a partition is
/// taken away, and which partitions a rebalance touched.
#[derive(Default)]
pub(super) struct GroupContext {
    /// Next offset to read, per partition, for everything acknowledged.
    pub acked: Mutex<HashMap<Partition, i64>>,
    /// Partitions assigned or revoked since the consumer last looked.
    pub moved: Mutex<Vec<Partition>>,
}

impl ClientContext for GroupContext {}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let revoked = partitions(tpl);
            let mut acked = lock(&self.acked);
            let mut commit = TopicPartitionList::new();
            for p in &revoked {
                if let Some(next) = acked.remove(p) {
                    let _ = commit.add_partition_offset(&p.0, p.1, Offset::Offset(next));
                }
            }
            if commit.count() > 0 {
                if let Err(e) = consumer.commit(&commit, CommitMode::Sync) {
                    tracing::warn!(error = %e, "committing offsets of revoked partitions failed; they will be redelivered");
                }
            }
            tracing::info!(partitions = ?revoked, "partitions revoked");
            lock(&self.moved).extend(revoked);
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            // A partition paused for backoff before it was revoked must not stay
            // paused when it comes back.
            let _ = consumer.resume(tpl);
            let assigned = partitions(tpl);
            tracing::info!(partitions = ?assigned, "partitions assigned");
            lock(&self.moved).extend(assigned);
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, _offsets: &TopicPartitionList) {
        if let Err(e) = result {
            tracing::warn!(error = %e, "offset commit failed; the records will be redelivered and found in the inbox");
        }
    }
}

fn partitions(tpl: &TopicPartitionList) -> Vec<Partition> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect()
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
