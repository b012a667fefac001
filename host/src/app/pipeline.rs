//! The consume loop: one record at a time from Kafka through the inbox runner,
//! and the one place that decides when an offset is committed.

use std::future::Future;
use std::sync::Arc;

use rdkafka::consumer::CommitMode;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tracing::Instrument;

use crate::inbox::{self, DeadLetter, Handler, Outcome, Runner};
use crate::kafka::{Consumer, Record};

/// Gives the handler version a new message starts on (a hot-swappable plugin, or
/// a fixed native handler).
pub trait HandlerSource: Send + Sync {
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
    /// Whether its offset was committed (before or after the transaction).
    pub committed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The runner's outcome.
    Handled(Outcome),
    /// Not handled: recorded in `inbox_host.dead_letters` with this reason.
    SetAside(String),
}

/// Limits on what the pipeline accepts.
#[derive(Debug, Clone)]
pub struct PipelineLimits {
    pub max_message_bytes: usize,
    pub max_attempts: Option<u32>,
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
}

const CAUGHT_UP_POLL: std::time::Duration = std::time::Duration::from_millis(250);

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
            limits: PipelineLimits {
                max_message_bytes: 1 << 20,
                max_attempts: None,
            },
            observer: Some(observer),
            metrics: None,
        };
        (pipeline, deliveries)
    }

    /// Consumes until `shutdown` resolves (or `stop` says so). A record being
    /// handled is finished first; then acknowledged offsets are committed and the
    /// group is left cleanly.
    pub async fn run(
        mut self,
        shutdown: impl Future<Output = ()>,
        stop: StopWhen,
    ) -> anyhow::Result<()> {
        tokio::pin!(shutdown);
        let mut delivered = 0u64;
        let mut caught_up_check = tokio::time::interval(CAUGHT_UP_POLL);
        loop {
            if stop.after_deliveries.is_some_and(|n| delivered >= n) {
                break;
            }
            let record = tokio::select! {
                biased;
                () = &mut shutdown => break,
                _ = caught_up_check.tick(), if stop.caught_up => {
                    let consumer = &self.consumer;
                    // Broker round trips; a transient error just means "not yet".
                    if tokio::task::block_in_place(|| consumer.caught_up()).unwrap_or(false) {
                        break;
                    }
                    continue;
                }
                record = self.consumer.next() => record?,
            };
            let delivery = self.deliver(&record).await?;
            delivered += 1;
            if let Some(metrics) = &self.metrics {
                metrics.record(&delivery.verdict);
            }
            if let Some(observer) = &self.observer {
                let _ = observer.send(delivery);
            }
        }
        let consumer = self.consumer;
        // Waits for the broker: the final commit and leaving the group.
        tokio::task::spawn_blocking(move || consumer.close()).await??;
        Ok(())
    }

    async fn deliver(&mut self, record: &Record) -> anyhow::Result<Delivery> {
        let span = tracing::info_span!(
            "message",
            topic = %record.topic,
            partition = record.partition,
            offset = record.offset,
            message_id = tracing::field::Empty,
            plugin = tracing::field::Empty,
        );
        let (verdict, committed) = self.decide(record).instrument(span).await?;
        Ok(Delivery {
            topic: record.topic.clone(),
            partition: record.partition,
            offset: record.offset,
            message_id: record.message_id.clone().ok(),
            verdict,
            committed,
        })
    }

    async fn decide(&mut self, record: &Record) -> anyhow::Result<(Verdict, bool)> {
        let id = match &record.message_id {
            Ok(id) => id.clone(),
            Err(why) => {
                let message = message_of(record, String::new());
                return self.set_aside(record, &message, None, why.clone()).await;
            }
        };
        tracing::Span::current().record("message_id", id.as_str());
        if record.payload.len() > self.limits.max_message_bytes {
            let why = format!(
                "payload of {} bytes exceeds --max-message-bytes {}",
                record.payload.len(),
                self.limits.max_message_bytes
            );
            let message = message_of(record, id.clone());
            return self.set_aside(record, &message, Some(&id), why).await;
        }
        let strategy = self.runner.settings().strategy;
        if strategy.commits_before() {
            let consumer = &mut self.consumer;
            if let Err(e) =
                tokio::task::block_in_place(|| consumer.acknowledge(record, CommitMode::Sync))
            {
                tracing::warn!(error = %e, "could not commit before handling (at-most-once); will retry");
                self.consumer.retry_later(record)?;
                return Ok((Verdict::Handled(Outcome::Failed(commit_failed(e))), false));
            }
        }

        let handler = self.source.current();
        tracing::Span::current().record("plugin", handler.version());
        let message = message_of(record, id);
        let outcome = self.runner.process(&message, &*handler).await;
        drop(handler);

        let committed = if strategy.commits_before() {
            if let Outcome::Failed(e) = &outcome {
                tracing::warn!(error = %e, "handler failed under at-most-once: the message is dropped by design");
            }
            true
        } else if strategy.commits_after(&outcome) {
            self.consumer.acknowledge(record, CommitMode::Async)?;
            true
        } else {
            return self.retry(record, &message, outcome).await;
        };
        log_outcome(&outcome, committed);
        Ok((Verdict::Handled(outcome), committed))
    }

    /// Holds the partition at `record` and retries it later, or sets it aside once
    /// it has used up `--max-attempts`.
    async fn retry(
        &mut self,
        record: &Record,
        message: &inbox::Message,
        outcome: Outcome,
    ) -> anyhow::Result<(Verdict, bool)> {
        let mut retry = self.consumer.retry_later(record)?;
        if let Outcome::Failed(e) = &outcome {
            // Counted outside the rolled-back transaction, so the budget survives
            // restarts; if the count cannot be written, the in-memory one serves.
            let group = &self.runner.settings().group;
            match inbox::record_failure(self.runner.pool(), group, message, &e.to_string()).await {
                Ok(total) => retry.attempt = u32::try_from(total).unwrap_or(retry.attempt),
                Err(db) => tracing::warn!(error = %db, "could not record the failed attempt"),
            }
            if self
                .limits
                .max_attempts
                .is_some_and(|max| retry.attempt >= max)
            {
                let why = format!("failed {} times; last: {e}", retry.attempt);
                return self
                    .set_aside(record, message, Some(&message.message_id), why)
                    .await;
            }
        }
        match &outcome {
            Outcome::Locked => tracing::info!(
                attempt = retry.attempt,
                retry_in_ms = retry.delay.as_millis() as u64,
                "inbox row held by another open transaction; not handled, offset not committed, retrying"
            ),
            Outcome::Failed(e) => tracing::warn!(
                kind = %e.kind,
                retryable = e.retryable,
                attempt = retry.attempt,
                retry_in_ms = retry.delay.as_millis() as u64,
                error = %e.message,
                "message failed; rolled back, offset not committed, partition rewound for retry"
            ),
            Outcome::Processed | Outcome::Duplicate => {}
        }
        Ok((Verdict::Handled(outcome), false))
    }

    /// Records the whole record in `inbox_host.dead_letters`, then acknowledges it.
    /// If that insert fails the record is retried, never skipped.
    async fn set_aside(
        &mut self,
        record: &Record,
        message: &inbox::Message,
        id: Option<&str>,
        why: String,
    ) -> anyhow::Result<(Verdict, bool)> {
        let settings = self.runner.settings();
        let letter = DeadLetter {
            group: &settings.group,
            worker_id: &settings.worker_id,
            message,
            message_id: id,
            reason: &why,
        };
        match inbox::dead_letter(self.runner.pool(), &letter).await {
            Ok(()) => {
                tracing::error!(
                    reason = %why,
                    "message set aside in inbox_host.dead_letters (not handled; original key, headers and payload kept)"
                );
                self.consumer.acknowledge(record, CommitMode::Async)?;
                Ok((Verdict::SetAside(why), true))
            }
            Err(e) => {
                tracing::error!(reason = %why, error = %e, "could not record dead letter; retrying the record");
                self.consumer.retry_later(record)?;
                Ok((Verdict::SetAside(why), false))
            }
        }
    }
}

fn message_of(record: &Record, message_id: String) -> inbox::Message {
    inbox::Message {
        message_id,
        topic: record.topic.clone(),
        partition: record.partition,
        offset: record.offset,
        key: record.key.clone(),
        headers: record
            .headers
            .iter()
            .map(|h| inbox::Header {
                key: h.key.clone(),
                value: h.value.clone(),
            })
            .collect(),
        payload: record.payload.clone(),
    }
}

fn commit_failed(e: rdkafka::error::KafkaError) -> inbox::HandlerError {
    inbox::HandlerError::new(
        inbox::FailureKind::Database,
        true,
        format!("offset commit failed: {e}"),
    )
}

fn log_outcome(outcome: &Outcome, committed: bool) {
    match outcome {
        Outcome::Processed => tracing::debug!(committed, "processed"),
        Outcome::Duplicate => tracing::info!(
            committed,
            "duplicate: already in the inbox; handler not run"
        ),
        Outcome::Locked => tracing::info!(committed, "locked by another worker"),
        Outcome::Failed(e) => {
            tracing::warn!(committed, kind = %e.kind, error = %e.message, "failed")
        }
    }
}
