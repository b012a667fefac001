//! The consume path: a worker per assigned partition (at most `--concurrency`
//! batches in flight), each taking its partition's records in order through
//! the inbox runner. This module starts and stops the workers; `worker.rs`
//! handles records; `decide.rs` says what happens to each.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::dead_letter_topic::DeadLetterTopic;
use super::decide::RetryPolicy;
use super::worker::{Shared, Worker};
use crate::inbox::{Handler, Message, Outcome, Runner};
use crate::kafka::Consumer;

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

/// What happened to one delivered record, as reported to an observer.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub message_id: Option<String>,
    pub verdict: Verdict,
    /// Whether it was acknowledged (its offset stored, or committed before it
    /// was handled).
    pub committed: bool,
}

impl Delivery {
    pub(super) fn of(message: &Message, verdict: Verdict, committed: bool) -> Self {
        Self {
            topic: message.topic.clone(),
            partition: message.partition,
            offset: message.offset,
            message_id: Some(message.message_id.clone()).filter(|id| !id.is_empty()),
            verdict,
            committed,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The runner's outcome.
    Handled(Outcome),
    /// Not handled: recorded in `inbox_host.dead_letters` with this reason.
    SetAside(String),
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
}

impl Default for PipelineLimits {
    fn default() -> Self {
        Self {
            max_message_bytes: 1 << 20,
            retry: RetryPolicy::default(),
            batch_max: 100,
            batch_linger: Duration::from_millis(5),
            concurrency: 8,
        }
    }
}

/// When to stop besides the shutdown signal (for the lab and tools).
#[derive(Debug, Clone, Copy, Default)]
pub struct StopWhen {
    pub after_deliveries: Option<u64>,
    pub caught_up: bool,
}

pub struct Pipeline<S> {
    pub consumer: Consumer,
    pub runner: Runner,
    pub source: S,
    pub limits: PipelineLimits,
    pub observer: Option<UnboundedSender<Delivery>>,
    pub metrics: Option<Arc<super::Metrics>>,
    /// Spans per attempt, when an OTLP endpoint is configured.
    pub traces: Option<Arc<super::Traces>>,
    /// Where set-aside records are published too.
    pub dead_letter_topic: Option<DeadLetterTopic>,
}

const CAUGHT_UP_POLL: Duration = Duration::from_millis(250);

impl<S: HandlerSource> Pipeline<S> {
    /// A pipeline that reports every delivery on the returned channel, with the
    /// CLI's default limits and no metrics: what the lab and tools run.
    pub fn observed(
        consumer: Consumer,
        runner: Runner,
        source: S,
    ) -> (Self, UnboundedReceiver<Delivery>) {
        let (observer, deliveries) = tokio::sync::mpsc::unbounded_channel();
        let pipeline = Self {
            consumer,
            runner,
            source,
            limits: PipelineLimits::default(),
            observer: Some(observer),
            metrics: None,
            traces: None,
            dead_letter_topic: None,
        };
        (pipeline, deliveries)
    }

    /// Consumes until `shutdown` resolves (or `stop` says so). Each worker
    /// finishes the batch in hand and stores its offset; then librdkafka commits
    /// the stored offsets and the member leaves the group. A failed final commit
    /// is logged, not an error: those records come again and the inbox finds them.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()>,
        stop: StopWhen,
    ) -> anyhow::Result<()> {
        let Pipeline {
            mut consumer,
            runner,
            source,
            limits,
            observer,
            metrics,
            traces,
            dead_letter_topic,
        } = self;
        let watched = observer.is_some() || stop.after_deliveries.is_some();
        let (deliveries_tx, mut deliveries) = tokio::sync::mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            runner,
            source,
            permits: Semaphore::new(limits.concurrency.max(1)),
            limits,
            metrics,
            traces,
            dead_letter_topic,
            deliveries: watched.then_some(deliveries_tx),
            budget: stop.after_deliveries.map(std::sync::atomic::AtomicU64::new),
        });
        let mut workers = JoinSet::new();
        let mut delivered = 0u64;
        let mut caught_up_check = tokio::time::interval(CAUGHT_UP_POLL);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                Some(delivery) = deliveries.recv() => {
                    delivered += 1;
                    if let Some(observer) = &observer {
                        let _ = observer.send(delivery);
                    }
                    if stop.after_deliveries.is_some_and(|n| delivered >= n) {
                        break;
                    }
                }
                Some(stream) = consumer.assigned() => {
                    workers.spawn(Worker::new(stream, shared.clone()).run());
                }
                Some(ended) = workers.join_next() => {
                    if let Err(e) = ended {
                        tracing::error!(error = %e, "a partition worker ended abnormally; /health/ready reports its partition until it is assigned again (restart the host)");
                    }
                }
                _ = caught_up_check.tick(), if stop.caught_up => {
                    // Broker round trips; a transient error just means "not yet".
                    if tokio::task::block_in_place(|| consumer.caught_up()).unwrap_or(false) {
                        break;
                    }
                }
            }
        }
        consumer.stop_partitions();
        while workers.join_next().await.is_some() {}
        if let Some(observer) = &observer {
            while let Ok(delivery) = deliveries.try_recv() {
                let _ = observer.send(delivery);
            }
        }
        // Waits for the broker: the final commit and leaving the group.
        tokio::task::spawn_blocking(move || consumer.close()).await?;
        Ok(())
    }
}
