//! A partition worker: takes the records of one assigned partition in order,
//! hands them to the runner in batches, decides each outcome's step and carries
//! it out. It never moves past a record that is not done, so per-partition
//! order holds and no offset past a failure is stored.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use futures_util::FutureExt;

mod aside;
mod feed;
mod lane;

pub(super) use feed::Feed;
pub(super) use lane::{Done, Lane, LaneWiring};

use super::dead_letter_topic::DeadLetterTopic;
use super::decide::{self, Step};
use super::failpoint;
use super::pending::{Aside, Pending};
use super::source::{HandlerSource, PipelineLimits};
use crate::app::delivery::Delivery;
use crate::app::observe::{Attempt, Metrics, Traces, Tracked};
use crate::app::relay::{RelayStatus, BACKLOG_EVERY};
use crate::inbox::{Handler, Message, Outcome, Runner};
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
    /// The outbox backlog, measured by the relay's side.
    pub outbox: Option<Arc<RelayStatus>>,
    /// Wakes this process's sender of requests after commit.
    pub requests: Option<Arc<tokio::sync::Notify>>,
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

pub(super) struct Worker<S> {
    /// The partition, or one key lane of it.
    stream: Feed,
    /// What `/metrics` and `/health/ready` see of this partition.
    progress: Option<Tracked>,
    shared: Arc<Shared<S>>,
    /// Records taken from the stream and not done yet, in offset order. A batch
    /// in flight stays here (the first `in_flight`), so a panic loses none.
    pending: VecDeque<Pending>,
    in_flight: usize,
    /// Records at the head whose batch committed, while the worker concludes
    /// it: a panic then leaves them done, never set aside.
    committed: usize,
    /// Restarts in place in a row (a panic inside the worker's own recovery),
    /// for the backoff; cleared when a batch commits.
    restarts: u32,
    /// After a panic in a batch: how many more turns take one record alone, to
    /// find the one it concerned (the batch's size).
    alone_for: usize,
    /// Failed attempts of the record at the head, this run (the attempts table
    /// holds the count across restarts).
    attempts: u32,
    /// When the attempt in hand started, and on which handler version (for
    /// spans and dead letters).
    started: SystemTime,
    plugin: String,
}

impl<S: HandlerSource> Worker<S> {
    /// The worker of a whole partition.
    pub fn for_partition(stream: PartitionStream, shared: Arc<Shared<S>>) -> Self {
        let progress = shared
            .metrics
            .as_ref()
            .map(|m| m.partitions().track(&stream));
        Self::new(Feed::Partition(stream), progress, shared)
    }

    /// The worker of one key lane: the partition's dispatcher tracks the
    /// partition's progress (its watermark), not the lane.
    pub fn for_lane(lane: Lane, shared: Arc<Shared<S>>) -> Self {
        Self::new(Feed::Lane(lane), None, shared)
    }

    fn new(stream: Feed, progress: Option<Tracked>, shared: Arc<Shared<S>>) -> Self {
        Self {
            progress,
            stream,
            shared,
            pending: VecDeque::new(),
            in_flight: 0,
            committed: 0,
            restarts: 0,
            alone_for: 0,
            attempts: 0,
            started: SystemTime::UNIX_EPOCH,
            plugin: String::new(),
        }
    }

    /// Runs until the partition is revoked or the member closes, then drops the
    /// stream (which lets the rebalance go on). A panic anywhere in the work is
    /// caught: the record it concerned is set aside and the worker goes on. A
    /// panic inside that recovery restarts the worker in place, after a
    /// backoff, with its stream and its records: the partition never waits for
    /// a rebalance or a restart of the host.
    pub async fn run(mut self) {
        loop {
            match AssertUnwindSafe(self.work_recovering())
                .catch_unwind()
                .await
            {
                Ok(()) => return,
                Err(panic) => {
                    let delay = self.restart(&crate::panics::text(&*panic));
                    if self.stream.signal().stopped_within(delay).await {
                        return;
                    }
                }
            }
        }
    }

    async fn work_recovering(&mut self) {
        loop {
            match AssertUnwindSafe(self.work()).catch_unwind().await {
                Ok(()) => return,
                Err(panic) => {
                    if let Some(delay) = self.recover(&crate::panics::text(&*panic)) {
                        if self.stream.signal().stopped_within(delay).await {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Waits while the outbox holds `--max-outbox-backlog` rows or more (the
    /// broker is down, or the relay cannot keep up): records wait in Kafka rather
    /// than their outgoing messages in the outbox.
    async fn outbox_room(&mut self) {
        let Some(outbox) = &self.shared.outbox else {
            return;
        };
        let max = self.shared.limits.max_outbox_backlog;
        while outbox.backlog_rows.load(Ordering::Relaxed) >= max {
            if self.stream.signal().stopped_within(BACKLOG_EVERY).await {
                return;
            }
        }
    }

    async fn work(&mut self) {
        loop {
            if self.pending.is_empty() {
                let Some(record) = self.stream.next().await else {
                    return;
                };
                self.push(record);
            }
            // After a failure (or a panic) the head goes alone (the single-record path).
            let want = if self.attempts > 0 || self.alone_for > 0 {
                1
            } else {
                self.shared.limits.batch_max
            };
            let want = want.min(self.shared.allowance());
            if want == 0 {
                self.stream.signal().stopped().await;
                return;
            }
            self.outbox_room().await;
            self.take_arrived(want).await;
            if self.stream.signal().is_stopped() {
                return;
            }
            if let Some(delay) = self.handle_head(want).await {
                if self.stream.signal().stopped_within(delay).await {
                    return;
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
        let pending = Pending::of(record, self.shared.limits.max_message_bytes);
        self.pending.push_back(pending);
    }

    /// Handles the records at the head (a batch of up to `want`, or one record
    /// to set aside); returns the delay before the head is tried again.
    async fn handle_head(&mut self, want: usize) -> Option<Duration> {
        self.alone_for = self.alone_for.saturating_sub(1);
        if self.pending.front()?.aside.is_some() {
            return self.set_aside_head().await;
        }
        let usable = self
            .pending
            .iter()
            .take(want)
            .take_while(|p| p.aside.is_none())
            .count();
        self.in_flight = usable;
        let (done, retry) = self.run_batch(usable).await;
        if let Some(outbox) = self.shared.outbox.as_ref().filter(|_| done > 0) {
            outbox.committed();
        }
        if let Some(requests) = self.shared.requests.as_ref().filter(|_| done > 0) {
            requests.notify_one();
        }
        self.in_flight = 0;
        if let Some(metrics) = &self.shared.metrics {
            for pending in self.pending.range(..done) {
                metrics.committed_record(pending.message.timestamp_ms);
            }
        }
        if let Some(last) = done.checked_sub(1).map(|n| self.pending[n].message.offset) {
            self.acknowledge(last);
        }
        if done > 0 && self.attempts > 0 && retry.is_none() {
            self.forget_attempts(0).await;
        }
        self.pending.drain(..done);
        self.committed = 0;
        if done > 0 {
            self.restarts = 0;
        }
        if retry.is_none() {
            // The head is done (or decided); a retry keeps the count of the
            // record now at the head (the one that failed).
            self.attempts = 0;
        }
        retry
    }

    /// Runs the first `n` pending records through the runner as one batch and
    /// acts on the outcomes; returns how many at its start are done, and the
    /// delay before a retry.
    async fn run_batch(&mut self, n: usize) -> (usize, Option<Duration>) {
        let Some(last) = n.checked_sub(1).map(|i| self.pending[i].message.offset) else {
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
        let messages: Vec<&Message> = self.pending.range(..n).map(|p| &p.message).collect();
        failpoint::check(&messages);
        self.stream.running(true);
        // Revoked (or the host stopping) and still running past the grace:
        // abandoned, so the rebalance or the exit does not wait for it. Its
        // transaction rolls back as it is dropped; nothing of it was
        // acknowledged, and its records come again to the partition's next
        // owner, which finds in the inbox whatever did commit.
        let outcomes = tokio::select! {
            biased;
            outcomes = shared.runner.process_batch(&messages, &*handler) => outcomes,
            () = self.stream.signal().past_grace() => {
                tracing::warn!(
                    topic = self.stream.topic(),
                    partition = self.stream.partition(),
                    records = n,
                    from_offset = messages[0].offset,
                    "a batch still running past the revoke grace (--revoke-grace-ms) was abandoned; its records come again to the partition's next owner"
                );
                self.stream.running(false);
                return (0, None);
            }
        };
        self.stream.running(false);
        self.committed = outcomes.iter().take_while(|o| o.committed()).count();
        failpoint::after_commit(&messages);
        if let Some(metrics) = &shared.metrics {
            metrics.transaction(messages.len(), started.elapsed());
        }
        drop(handler);
        self.conclude(outcomes).await
    }

    /// Acts on each outcome of the batch at the head: the committed ones are
    /// done, the last one (if it did not commit) gets the step
    /// [`decide::decide`] gives it.
    async fn conclude(&mut self, outcomes: Vec<Outcome>) -> (usize, Option<Duration>) {
        let strategy = self.shared.runner.settings().strategy;
        let mut done = 0;
        let duplicates = outcomes
            .iter()
            .filter(|o| **o == Outcome::Duplicate)
            .count();
        if duplicates > 0 {
            tracing::info!(
                duplicates,
                from_offset = self.pending[0].message.offset,
                "duplicates: already in the inbox; handler not run, offsets stored"
            );
        }
        for (at, outcome) in outcomes.into_iter().enumerate() {
            if outcome.committed() {
                done += 1;
                let message = &self.pending[at].message;
                tracing::debug!(offset = message.offset, message_id = %message.message_id, outcome = outcome.label(), "done");
                self.report(message, outcome, true);
                continue;
            }
            if done > 0 {
                // A record after the head failed: its count starts afresh.
                self.attempts = 0;
            }
            let attempts = self.count_attempt(at, &outcome).await;
            let message = &self.pending[at].message;
            match decide::decide(&outcome, attempts, &self.shared.limits.retry, strategy) {
                Step::Acknowledge => {
                    if let Outcome::Failed(e) = &outcome {
                        tracing::warn!(offset = message.offset, message_id = %message.message_id, kind = %e.kind, error = %e.message,
                            "message failed; acknowledged anyway by the strategy ({strategy}), not retried");
                    }
                    done += 1;
                    self.report(message, outcome, true);
                }
                Step::RetryAfter(delay) => {
                    log_retry(message, &outcome, attempts, delay);
                    self.report(message, outcome, false);
                    return (done, Some(delay));
                }
                Step::SetAside(reason) => {
                    let kind = match &outcome {
                        Outcome::Failed(e) => e.kind.as_str(),
                        _ => "locked",
                    };
                    // Decided once: the worker sets it aside next, and retries
                    // only that if it fails.
                    self.pending[at].aside = Some(Aside {
                        reason,
                        kind,
                        attempts,
                    });
                    return (done, None);
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

    fn report(&self, message: &Message, outcome: Outcome, acknowledged: bool) {
        if let Some(traces) = &self.shared.traces {
            let attempt = Attempt {
                started: self.started,
                plugin: &self.plugin,
            };
            traces.attempt(message, &attempt, &outcome);
        }
        if let Some(left) = &self.shared.budget {
            let _ = left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        }
        if let Some(metrics) = &self.shared.metrics {
            metrics.record(&outcome);
        }
        if let Some(deliveries) = &self.shared.deliveries {
            let _ = deliveries.send(Delivery::of(message, outcome, acknowledged));
        }
    }
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
        Outcome::Processed | Outcome::Duplicate | Outcome::SetAside(_) => {}
    }
}
