//! The consume path: a worker per assigned partition (at most `--concurrency`
//! batches in flight), each taking its partition's records in order through
//! the inbox runner. This module starts and stops the workers; `worker.rs`
//! handles records; `decide.rs` says what happens to each.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;

use super::dead_letter_topic::DeadLetterTopic;
use super::lanes;
use super::source::{HandlerSource, PipelineLimits};
use super::worker::{Shared, Worker};
use crate::app::delivery::Delivery;
use crate::app::observe::{Metrics, Traces};
use crate::app::relay::RelayStatus;
use crate::inbox::Runner;
use crate::kafka::Consumer;

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
    pub metrics: Option<Arc<Metrics>>,
    /// Spans per attempt, when an OTLP endpoint is configured.
    pub traces: Option<Arc<Traces>>,
    /// Where set-aside records are published too.
    pub dead_letter_topic: Option<DeadLetterTopic>,
    /// The outbox backlog the consume side slows down on.
    pub outbox: Option<Arc<RelayStatus>>,
    /// Wakes the sender of requests after commit after a batch commits.
    pub requests: Option<Arc<Notify>>,
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
            outbox: None,
            requests: None,
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
            outbox,
            requests,
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
            outbox,
            requests,
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
                    if shared.limits.key_lanes > 1 && !shared.runner.settings().strategy.commits_before() {
                        workers.spawn(lanes::run(stream, shared.clone()));
                    } else {
                        workers.spawn(Worker::for_partition(stream, shared.clone()).run());
                    }
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
        if consumer.leave().await {
            tracing::info!("stored offsets committed; left the consumer group");
        } else {
            tracing::warn!("leaving the consumer group did not finish in time (the brokers do not answer); exiting without it: the records since the last commit come again to the partitions' next owner, which finds them in the inbox");
        }
        Ok(())
    }
}
