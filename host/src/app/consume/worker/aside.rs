//! Setting a record aside and the attempts that lead there: the worker's one
//! owner of `inbox_host.attempts` (counted in `count_attempt`, removed in
//! `forget_attempts`) and of the dead-letter table and topic; and what a panic
//! in the worker sets aside (`recover`).

use std::time::Duration;

use super::Worker;
use crate::app::consume::pending::Aside;
use crate::app::consume::source::HandlerSource;
use crate::app::consume::{decide, failpoint};
use crate::inbox::{self, DeadLetter, FailureKind, Outcome};

impl<S: HandlerSource> Worker<S> {
    /// After a panic in [`Worker::work`]: a batch in flight is taken apart (its
    /// records go one at a time); a record in flight alone is set aside with
    /// the panic as its reason. A panic while setting one aside is retried after
    /// a backoff. Returns that delay.
    pub(super) fn recover(&mut self, panic: &str) -> Option<Duration> {
        failpoint::in_recovery();
        self.keep_committed();
        let in_flight = std::mem::take(&mut self.in_flight);
        tracing::error!(
            topic = self.stream.topic(),
            partition = self.stream.partition(),
            in_flight,
            panic,
            "the host panicked in a partition worker; the worker goes on"
        );
        if in_flight > 1 {
            self.alone_for = in_flight;
            return None;
        }
        let attempts = self.attempts + 1;
        match self.pending.front_mut() {
            Some(head) if in_flight == 1 && head.aside.is_none() => {
                head.aside = Some(Aside {
                    reason: format!("the host panicked while handling this record: {panic}"),
                    kind: FailureKind::HostPanic.as_str(),
                    attempts,
                });
                None
            }
            Some(_) => Some(self.retry_delay()),
            None => None,
        }
    }

    /// After a panic inside [`Worker::recover`]: the worker starts again on
    /// the same stream with the same records, the batch in flight taken apart
    /// (its records go one at a time, so a panic again sets only its own record
    /// aside). Returns the backoff before it goes on.
    pub(super) fn restart(&mut self, panic: &str) -> Duration {
        self.restarts += 1;
        self.keep_committed();
        self.alone_for = self.alone_for.max(std::mem::take(&mut self.in_flight));
        let delay = self.shared.limits.retry.backoff.delay(self.restarts);
        tracing::error!(
            topic = self.stream.topic(),
            partition = self.stream.partition(),
            restarts = self.restarts,
            restart_in_ms = delay.as_millis() as u64,
            panic,
            "a partition worker panicked while recovering from a panic; restarted in place (its records kept)"
        );
        if let Some(metrics) = &self.shared.metrics {
            metrics.worker_restarted(self.stream.topic(), self.stream.partition());
        }
        delay
    }

    /// The records at the head whose batch committed before a panic: done
    /// (their offset stored), never set aside or run again.
    fn keep_committed(&mut self) {
        let committed = std::mem::take(&mut self.committed).min(self.pending.len());
        let Some(last) = committed.checked_sub(1) else {
            return;
        };
        self.acknowledge(self.pending[last].message.offset);
        self.pending.drain(..committed);
        self.in_flight = self.in_flight.saturating_sub(committed);
        self.attempts = 0;
    }

    /// Sets the head aside as decided; on failure, only the set-aside is tried
    /// again after a backoff, never the handler.
    pub(super) async fn set_aside_head(&mut self) -> Option<Duration> {
        self.in_flight = 1;
        let recorded = self.set_aside(0).await;
        self.in_flight = 0;
        if !recorded {
            return Some(self.retry_delay());
        }
        if self.pending[0]
            .aside
            .as_ref()
            .is_some_and(|a| a.attempts > 0)
        {
            // A record the handler ran: done, as far as latency goes.
            if let Some(metrics) = &self.shared.metrics {
                metrics.committed_record(self.pending[0].message.timestamp_ms);
            }
            self.forget_attempts(0).await;
        }
        let head = self.pending.pop_front()?;
        self.acknowledge(head.message.offset);
        self.attempts = 0;
        None
    }

    /// Counts a failed attempt of the pending record `at`: in
    /// `inbox_host.attempts` when the record may be retried (so the budget
    /// survives restarts), else in memory.
    pub(super) async fn count_attempt(&mut self, at: usize, outcome: &Outcome) -> u32 {
        self.attempts += 1;
        let strategy = self.shared.runner.settings().strategy;
        if let (Outcome::Failed(e), true) = (outcome, decide::counts_attempt(outcome, strategy)) {
            let runner = &self.shared.runner;
            let group = &runner.settings().group;
            let message = &self.pending[at].message;
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

    /// Removes the attempts row of the pending record `at`, now done (or set
    /// aside). A failure only leaves it to retention.
    pub(super) async fn forget_attempts(&self, at: usize) {
        let runner = &self.shared.runner;
        let message = &self.pending[at].message;
        if let Err(e) =
            inbox::forget_attempts(runner.pool(), &runner.settings().group, message).await
        {
            tracing::debug!(error = %e, "could not remove the record's attempts row; retention removes it");
        }
    }

    /// Records the pending record `at` in `inbox_host.dead_letters` as decided
    /// and, with `--dead-letter-topic`, publishes it there; returns whether both
    /// were done (if not, the set-aside is retried, never the handler, and the
    /// offset is not stored). The row goes first: writing it again is a no-op,
    /// so a retry after a failed publish adds no second row.
    async fn set_aside(&self, at: usize) -> bool {
        let settings = self.shared.runner.settings();
        let pending = &self.pending[at];
        let Some(aside) = &pending.aside else {
            return false;
        };
        let message = &pending.message;
        let ran = aside.attempts > 0;
        let letter = DeadLetter {
            group: &settings.group,
            worker_id: &settings.worker_id,
            message,
            message_id: pending.message_id(),
            reason: &aside.reason,
            kind: aside.kind,
            attempts: aside.attempts,
            plugin_digest: Some(self.plugin.as_str()).filter(|d| ran && !d.is_empty()),
        };
        if let Err(e) = inbox::dead_letter(self.shared.runner.pool(), &letter).await {
            tracing::error!(reason = %aside.reason, error = %e, "could not record the dead letter; retrying that (the handler does not run again)");
            return false;
        }
        if let Some(topic) = &self.shared.dead_letter_topic {
            if let Err(e) = topic.publish(&letter).await {
                tracing::error!(reason = %aside.reason, dead_letter_topic = topic.name(), error = %e,
                    "could not publish the dead letter; retrying that (the handler does not run again; the offset is not stored)");
                return false;
            }
        }
        tracing::error!(
            topic = %message.topic, partition = message.partition, offset = message.offset,
            reason = %aside.reason,
            "message set aside in inbox_host.dead_letters (not handled; original key, headers and payload kept)"
        );
        if let Some(metrics) = &self.shared.metrics {
            metrics.dead_letter(aside.kind);
        }
        self.report(message, Outcome::SetAside(aside.reason.clone()), true);
        true
    }
}
