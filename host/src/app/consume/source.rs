//! What a pipeline is given: where the handler comes from, and its limits.

use std::sync::Arc;
use std::time::Duration;

use super::decide::RetryPolicy;
use crate::inbox::Handler;

/// Gives the handler version a new batch starts on (a hot-swappable plugin, or
/// a fixed native handler).
pub trait HandlerSource: Send + Sync + 'static {
    type Handler: Handler + Send + Sync + 'static;
    fn current(&self) -> Arc<Self::Handler>;
}

impl HandlerSource for crate::plugin::PluginCell {
    type Handler = crate::plugin::Plugin;
    fn current(&self) -> Arc<Self::Handler> {
        crate::plugin::PluginCell::current(self)
    }
}

impl<H: Handler + Send + Sync + 'static> HandlerSource for Arc<H> {
    type Handler = H;
    fn current(&self) -> Arc<H> {
        Arc::clone(self)
    }
}

/// What the pipeline accepts, how it batches and how it retries.
#[derive(Debug, Clone)]
pub struct PipelineLimits {
    pub max_message_bytes: usize,
    pub retry: RetryPolicy,
    /// Most records in one transaction (`1`: one transaction per record).
    pub batch_max: usize,
    /// How long a worker waits for more records to fill a batch.
    pub batch_linger: Duration,
    /// Most batches in flight at once, across partitions.
    pub concurrency: usize,
    /// Outbox rows waiting past which no worker starts a batch
    /// (`--max-outbox-backlog`).
    pub max_outbox_backlog: i64,
    /// Lanes per partition, by record key (`--key-lanes`; 1: the partition's
    /// records one batch after another).
    pub key_lanes: usize,
    /// Most records of a partition dispatched to its lanes and not done
    /// (`--lane-lookahead`).
    pub lane_lookahead: usize,
}

impl Default for PipelineLimits {
    fn default() -> Self {
        Self {
            max_message_bytes: 1 << 20,
            retry: RetryPolicy::default(),
            batch_max: 100,
            batch_linger: Duration::from_millis(5),
            concurrency: 8,
            max_outbox_backlog: 100_000,
            key_lanes: 1,
            lane_lookahead: crate::cli::DEFAULT_LANE_LOOKAHEAD,
        }
    }
}
