//! A partition worker: takes the records of one assigned partition in order,
//! hands them to the runner in batches, decides each outcome's step and carries
//! it out. It never moves past a record that is not done, so per-partition
//! order holds and no offset past a failure is stored.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::dead_letter_topic::DeadLetterTopic;
use super::decide::{self, Step};
use super::pipeline::{Delivery, HandlerSource, PipelineLimits, Verdict};
use super::progress::Tracked;
use super::traces::Attempt;
use super::{Metrics, Traces};
use crate::inbox::{self, DeadLetter, Handler, Message, Outcome, Runner};
use crate::kafka::{PartitionStream, Record};

/// What every worker of a pipeline shares.
pub(super) struct Shared<S> {
    pub runner: Runner,
    pub source: S,
    pub limits: PipelineLimits,
    /// Batches in flight at once, across partitions (`--concurrency`).
    pub permits: Semaphore,
    pub metrics: Option<Arc<Metrics>>,
    pub traces: Option<Arc<Traces>>,
    /// Where set-aside records are published too (`--dead-letter-topic`).
    pub dead_letter_topic: Option<DeadLetterTopic>,
    pub deliveries: Option<UnboundedSender<Delivery>>,
    /// Deliveries left before the pipeline stops (`StopWhen::after_deliveries`):
    /// no worker starts a batch past it.
    pub budget: Option<AtomicU64>,
}

impl<S> Shared<S> {
    /// How many more records may be handled.
    fn allowance(&self) -> usize {
        self.budget.as_ref().map_or(usize::MAX, |left| {
            usize::try_from(left.load(Ordering::SeqCst)).unwrap_or(usize::MAX)
        })
    }
}

/// A record taken from the stream, owned by the worker until it is done.
struct Pending {
    message: Message,
    /// The record's Kafka timestamp (ms since 1970), for end-to-end latency.
    timestamp_ms: Option<i64>,
    /// Why the host cannot use it (no id, too large): it is set aside unhandled.
    unusable: Option<String>,
}

pub(super) struct Worker<S> {
    stream: PartitionStream,
    /// What `/metrics` and `/health/ready` see of this partition.
    progress: Option<Tracked>,
    shared: Arc<Shared<S>>,
    pending: VecDeque<Pending>,
    /// Failed attempts of the record at the head, this run (the attempts table
    /// holds the count across restarts).
    attempts: u32,
    /// When the attempt in hand started, and on which handler version (for
    /// spans and dead letters).
    started: SystemTime,
    plugin: String,
}

impl<S: HandlerSource> Worker<S> {
    pub fn new(stream: PartitionStream, shared: Arc<Shared<S>>) -> Self {
        let progress = shared
            .metrics
            .as_ref()
            .map(|m| m.partitions().track(&stream));
        Self {
            progress,
            stream,
            shared,
            pending: VecDeque::new(),
            attempts: 0,
            started: SystemTime::UNIX_EPOCH,
            plugin: String::new(),
        }
    }

    /// Runs until the partition is revoked or the member closes, then drops the
    /// stream (which lets the rebalance go on).
    pub async fn run(mut self) {
        loop {
            if self.pending.is_empty() {
                let Some(record) = self.stream.next().await else {
                    return;
                };
                self.push(record);
            }
            // After a failure the head goes alone (the single-record path).
            let want = if self.attempts > 0 {
                1
            } else {
                self.shared.limits.batch_max
            };
            let want = want.min(self.shared.allowance());
            if want == 0 {
                self.stream.stopped().await;
                return;
            }
            self.take_arrived(want).await;
            if self.stream.is_stopped() {
                return;
            }
            if let Some(delay) = self.handle_head(want).await {
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = self.stream.stopped() => return,
                }
            }
        }
    }

    /// Adds what has already arrived, up to `want` pending records, waiting at
    /// most `--batch-linger-ms` for more.
    async fn take_arrived(&mut self, want: usize) {
        let linger = Instant::now() + self.shared.limits.batch_linger;
        while self.pending.len() < want {
            if let Some(record) = self.stream.try_next() {
                self.push(record);
                continue;
            }
            match tokio::time::timeout_at(linger, self.stream.next()).await {
                Ok(Some(record)) => self.push(record),
                Ok(None) | Err(_) => return,
            }
        }
    }

    fn push(&mut self, record: Record) {
        if let Some(tracked) = &self.progress {
            tracked.progress.arrived(record.offset);
        }
        let pending = pending_of(record, self.shared.limits.max_message_bytes);
        self.pending.push_back(pending);
    }

    /// Handles the records at the head (a batch of up to `want`, or one
    /// unusable record); returns the delay before the head is tried again.
    async fn handle_head(&mut self, want: usize) -> Option<Duration> {
        let head = self.pending.pop_front()?;
        if let Some(why) = head.unusable.clone() {
            self.started = SystemTime::now();
            if self.set_aside(&head, None, why, "unusable").await {
                self.acknowledge(head.message.offset);
                self.attempts = 0;
                return None;
            }
            self.pending.push_front(head);
            return Some(self.retry_delay());
        }
        self.pending.push_front(head);
        let usable = self
            .pending
            .iter()
            .take(want)
            .take_while(|p| p.unusable.is_none())
            .count();
        // Taken out while in flight (moved, not copied); what is not done goes back.
        let batch: Vec<Pending> = self.pending.drain(..usable).collect();
        let (done, retry) = self.run_batch(&batch).await;
        if let Some(metrics) = &self.shared.metrics {
            for pending in &batch[..done] {
                metrics.committed_record(pending.timestamp_ms);
            }
        }
        if let Some(last) = done.checked_sub(1).map(|n| batch[n].message.offset) {
            self.acknowledge(last);
        }
        for pending in batch.into_iter().skip(done).rev() {
            self.pending.push_front(pending);
        }
        if retry.is_none() {
            // The head is done; a retry keeps the count of the record now at
            // the head (the one that failed).
            self.attempts = 0;
        }
        retry
    }

    /// Runs one batch through the runner and acts on the outcomes; returns how
    /// many records at its start are done, and the delay before a retry.
    async fn run_batch(&mut self, batch: &[Pending]) -> (usize, Option<Duration>) {
        let Some(last) = batch.last().map(|p| p.message.offset) else {
            return (0, None);
        };
        let strategy = self.shared.runner.settings().strategy;
        let shared = self.shared.clone();
        let Ok(_permit) = shared.permits.acquire().await else {
            return (0, None);
        };
        if strategy.commits_before() {
            if let Err(e) = self.stream.store_and_commit(last).await {
                tracing::warn!(error = %e, "could not commit before handling (at-most-once); retrying");
                return (0, Some(self.retry_delay()));
            }
        }
        let handler = shared.source.current();
        self.started = SystemTime::now();
        self.plugin.clear();
        self.plugin.push_str(handler.version());
        let started = std::time::Instant::now();
        let messages: Vec<&Message> = batch.iter().map(|p| &p.message).collect();
        let outcomes = shared.runner.process_batch(&messages, &*handler).await;
        if let Some(metrics) = &shared.metrics {
            metrics.transaction(messages.len(), started.elapsed());
        }
        drop(handler);
        self.conclude(batch, outcomes).await
    }

    /// Acts on each outcome: the committed ones are done, the last one (if it
    /// did not commit) gets the step [`decide::decide`] gives it.
    async fn conclude(
        &mut self,
        batch: &[Pending],
        outcomes: Vec<Outcome>,
    ) -> (usize, Option<Duration>) {
        let strategy = self.shared.runner.settings().strategy;
        let mut done = 0;
        let duplicates = outcomes
            .iter()
            .filter(|o| **o == Outcome::Duplicate)
            .count();
        if duplicates > 0 {
            tracing::info!(
                duplicates,
                from_offset = batch[0].message.offset,
                "duplicates: already in the inbox; handler not run, offsets stored"
            );
        }
        for (pending, outcome) in batch.iter().zip(outcomes) {
            let message = &pending.message;
            if outcome.committed() {
                done += 1;
                tracing::debug!(offset = message.offset, message_id = %message.message_id, outcome = outcome.label(), "done");
                self.report(message, Verdict::Handled(outcome), true);
                continue;
            }
            if done > 0 {
                // A record after the head failed: its count starts afresh.
                self.attempts = 0;
            }
            let attempts = self.count_attempt(message, &outcome).await;
            match decide::decide(&outcome, attempts, &self.shared.limits.retry, strategy) {
                Step::Acknowledge => {
                    if let Outcome::Failed(e) = &outcome {
                        tracing::warn!(offset = message.offset, message_id = %message.message_id, kind = %e.kind, error = %e.message,
                            "message failed; acknowledged anyway by the strategy ({strategy}), not retried");
                    }
                    done += 1;
                    self.report(message, Verdict::Handled(outcome), true);
                }
                Step::RetryAfter(delay) => {
                    log_retry(message, &outcome, attempts, delay);
                    self.report(message, Verdict::Handled(outcome), false);
                    return (done, Some(delay));
                }
                Step::SetAside(why) => {
                    let id = Some(message.message_id.as_str());
                    let kind = match &outcome {
                        Outcome::Failed(e) => e.kind.as_str(),
                        _ => "locked",
                    };
                    if !self.set_aside(pending, id, why, kind).await {
                        return (done, Some(self.retry_delay()));
                    }
                    done += 1;
                }
            }
        }
        (done, None)
    }

    /// The record at `offset` and everything before it are done.
    fn acknowledge(&self, offset: i64) {
        if let Some(tracked) = &self.progress {
            tracked.progress.done_through(offset);
        }
        if self.shared.runner.settings().strategy.commits_before() {
            return;
        }
        if let Err(e) = self.stream.store(offset) {
            // The partition moved: its new owner starts from the last commit and
            // finds these records in the inbox.
            tracing::debug!(error = %e, offset, "offset not stored: partition no longer assigned");
        }
    }

    /// The wait before retrying a step the host itself could not carry out.
    fn retry_delay(&mut self) -> Duration {
        self.attempts += 1;
        self.shared.limits.retry.backoff.delay(self.attempts)
    }

    /// Counts a failed attempt: in `inbox_host.attempts` when the record may be
    /// retried (so the budget survives restarts), else in memory.
    async fn count_attempt(&mut self, message: &Message, outcome: &Outcome) -> u32 {
        self.attempts += 1;
        let strategy = self.shared.runner.settings().strategy;
        if let (Outcome::Failed(e), true) = (outcome, decide::counts_attempt(outcome, strategy)) {
            let runner = &self.shared.runner;
            let group = &runner.settings().group;
            match inbox::record_failure(runner.pool(), group, message, &e.to_string()).await {
                Ok(total) => self.attempts = u32::try_from(total).unwrap_or(self.attempts),
                Err(db) => tracing::warn!(error = %db, "could not record the failed attempt"),
            }
        }
        if let Some(tracked) = &self.progress {
            tracked.progress.holding(self.attempts);
        }
        self.attempts
    }

    /// Records the whole record in `inbox_host.dead_letters` and, with
    /// `--dead-letter-topic`, publishes it there; returns whether both were
    /// done (if not, the record is retried, never skipped, and its offset is
    /// not stored). The row goes first: writing it again is a no-op, so a
    /// retry after a failed publish adds no second row.
    async fn set_aside(
        &self,
        pending: &Pending,
        id: Option<&str>,
        why: String,
        kind: &'static str,
    ) -> bool {
        let settings = self.shared.runner.settings();
        let message = &pending.message;
        let ran = pending.unusable.is_none();
        let letter = DeadLetter {
            group: &settings.group,
            worker_id: &settings.worker_id,
            message,
            message_id: id,
            reason: &why,
            kind,
            attempts: if ran { self.attempts } else { 0 },
            plugin_digest: Some(self.plugin.as_str()).filter(|d| ran && !d.is_empty()),
            timestamp_ms: pending.timestamp_ms,
        };
        if let Err(e) = inbox::dead_letter(self.shared.runner.pool(), &letter).await {
            tracing::error!(reason = %why, error = %e, "could not record dead letter; retrying the record");
            return false;
        }
        if let Some(topic) = &self.shared.dead_letter_topic {
            if let Err(e) = topic.publish(&letter).await {
                tracing::error!(reason = %why, dead_letter_topic = topic.name(), error = %e,
                    "could not publish the dead letter; retrying the record (its offset is not stored)");
                return false;
            }
        }
        tracing::error!(
            topic = %message.topic, partition = message.partition, offset = message.offset,
            reason = %why,
            "message set aside in inbox_host.dead_letters (not handled; original key, headers and payload kept)"
        );
        if let Some(metrics) = &self.shared.metrics {
            metrics.dead_letter(kind);
        }
        self.report(message, Verdict::SetAside(why), true);
        true
    }

    fn report(&self, message: &Message, verdict: Verdict, committed: bool) {
        if let Some(traces) = &self.shared.traces {
            let attempt = Attempt {
                started: self.started,
                plugin: &self.plugin,
            };
            traces.attempt(message, &attempt, &verdict);
        }
        if let Some(left) = &self.shared.budget {
            let _ = left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        }
        if let Some(metrics) = &self.shared.metrics {
            metrics.record(&verdict);
        }
        if let Some(deliveries) = &self.shared.deliveries {
            let _ = deliveries.send(Delivery::of(message, verdict, committed));
        }
    }
}

/// Moves a record into the runner's message, noting why the host cannot use it.
fn pending_of(record: Record, max_message_bytes: usize) -> Pending {
    let timestamp_ms = record.timestamp_ms;
    let (message, mut unusable) = message_of(record);
    if unusable.is_none() && message.payload.len() > max_message_bytes {
        unusable = Some(format!(
            "payload of {} bytes exceeds --max-message-bytes {max_message_bytes}",
            message.payload.len()
        ));
    }
    Pending {
        timestamp_ms,
        message,
        unusable,
    }
}

/// Moves a record into the runner's message (no field copied), with why it
/// has no usable message id, if so.
pub(super) fn message_of(record: Record) -> (Message, Option<String>) {
    let (message_id, unusable) = match record.message_id {
        Ok(id) => (id, None),
        Err(why) => (String::new(), Some(why)),
    };
    let headers = record
        .headers
        .into_iter()
        .map(|h| inbox::Header {
            key: h.key,
            value: h.value,
        })
        .collect();
    let message = Message {
        message_id,
        topic: record.topic,
        partition: record.partition,
        offset: record.offset,
        key: record.key,
        headers,
        payload: record.payload,
    };
    (message, unusable)
}

fn log_retry(message: &Message, outcome: &Outcome, attempt: u32, delay: Duration) {
    let retry_in_ms = delay.as_millis() as u64;
    match outcome {
        Outcome::Locked => tracing::info!(
            offset = message.offset, message_id = %message.message_id, attempt, retry_in_ms,
            "inbox row held by another open transaction; not handled, offset not stored, retrying"
        ),
        Outcome::Failed(e) => tracing::warn!(
            topic = %message.topic, partition = message.partition, offset = message.offset,
            message_id = %message.message_id, kind = %e.kind, retryable = e.retryable, attempt, retry_in_ms,
            error = %e.message,
            "message failed; rolled back, offset not stored, retrying it in place"
        ),
        Outcome::Processed | Outcome::Duplicate => {}
    }
}
