//! What happens to a record next, decided once from its outcome: a pure
//! function of (outcome, attempts, policy, strategy), tested as a table. The
//! partition worker only carries the step out.

use std::time::Duration;

use crate::inbox::{Outcome, Strategy};

/// Exponential backoff between attempts of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The wait after the `attempt`-th failure in a row (1 for the first).
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(20));
        self.initial.saturating_mul(factor).min(self.max)
    }
}

/// How often, and how patiently, a failing record is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub backoff: Backoff,
    /// Attempts before a record failing with a retryable error is set aside
    /// (`None`: never, the partition waits for the cause to go away).
    pub max_attempts: Option<u32>,
    /// Attempts before a record failing with an error that cannot succeed by
    /// waiting (a rejected payload, a panic, a refused statement) is set aside.
    pub max_fatal_attempts: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            backoff: Backoff {
                initial: Duration::from_millis(200),
                max: Duration::from_secs(30),
            },
            max_attempts: None,
            max_fatal_attempts: 3,
        }
    }
}

/// The longest wait between attempts of a fatal failure: it is tried a few
/// times only to rule out a fluke, so its partition moves on within seconds.
pub const FATAL_DELAY_CAP: Duration = Duration::from_secs(1);

/// What to do with a record after its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// It is done: store its offset.
    Acknowledge,
    /// Hold the partition at it and try it again after this delay.
    RetryAfter(Duration),
    /// Record it in `inbox_host.dead_letters` with this reason, then acknowledge it.
    SetAside(String),
}

/// Whether a failed attempt with this outcome is counted (in
/// `inbox_host.attempts`) before deciding: only when the record may be retried.
pub fn counts_attempt(outcome: &Outcome, strategy: Strategy) -> bool {
    matches!(outcome, Outcome::Failed(_)) && !strategy.acknowledges(outcome)
}

/// The one decision. `attempts` counts this record's failures so far, this one
/// included (locked attempts too).
pub fn decide(outcome: &Outcome, attempts: u32, policy: &RetryPolicy, strategy: Strategy) -> Step {
    if strategy.acknowledges(outcome) {
        return Step::Acknowledge;
    }
    match outcome {
        Outcome::Processed | Outcome::Duplicate | Outcome::SetAside(_) => Step::Acknowledge,
        Outcome::Locked => Step::RetryAfter(policy.backoff.delay(attempts)),
        Outcome::Failed(error) => {
            let budget = if error.kind.is_final() {
                Some(1)
            } else if error.retryable {
                policy.max_attempts
            } else {
                Some(
                    policy
                        .max_attempts
                        .map_or(policy.max_fatal_attempts, |max| {
                            max.min(policy.max_fatal_attempts)
                        }),
                )
            };
            if budget.is_some_and(|max| attempts >= max) {
                Step::SetAside(format!("failed {attempts} times; last: {error}"))
            } else if error.retryable {
                Step::RetryAfter(policy.backoff.delay(attempts))
            } else {
                Step::RetryAfter(policy.backoff.delay(attempts).min(FATAL_DELAY_CAP))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbox::{CommitOn, FailureKind, HandlerError};

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn policy(max_attempts: Option<u32>) -> RetryPolicy {
        RetryPolicy {
            backoff: Backoff {
                initial: MS(200),
                max: Duration::from_secs(30),
            },
            max_attempts,
            max_fatal_attempts: 3,
        }
    }

    fn failed(retryable: bool) -> Outcome {
        Outcome::Failed(HandlerError::new(
            FailureKind::HandlerError,
            retryable,
            "boom",
        ))
    }

    fn publish_refused() -> Outcome {
        Outcome::Failed(HandlerError::new(FailureKind::PublishRule, false, "IH013"))
    }

    #[test]
    fn each_outcome_strategy_and_attempt_count_leads_to_one_step() {
        use Step::*;
        let eoi = Strategy::ExactlyOnceInbox;
        let set_aside = |n: u32| SetAside(format!("failed {n} times; last: handler-error: boom"));
        let table: Vec<(Outcome, u32, Option<u32>, Strategy, Step)> = vec![
            (Outcome::Processed, 0, None, eoi, Acknowledge),
            (Outcome::Duplicate, 0, None, eoi, Acknowledge),
            (Outcome::Locked, 1, None, eoi, RetryAfter(MS(200))),
            (Outcome::Locked, 3, Some(1), eoi, RetryAfter(MS(800))),
            // Retryable: backoff doubles, forever by default.
            (failed(true), 1, None, eoi, RetryAfter(MS(200))),
            (failed(true), 4, None, eoi, RetryAfter(MS(1600))),
            (
                failed(true),
                50,
                None,
                eoi,
                RetryAfter(Duration::from_secs(30)),
            ),
            (failed(true), 2, Some(3), eoi, RetryAfter(MS(400))),
            (failed(true), 3, Some(3), eoi, set_aside(3)),
            // Fatal: short delays, set aside after three attempts by default.
            (failed(false), 1, None, eoi, RetryAfter(MS(200))),
            (failed(false), 2, None, eoi, RetryAfter(MS(400))),
            (failed(false), 3, None, eoi, set_aside(3)),
            (failed(false), 2, Some(2), eoi, set_aside(2)),
            (failed(false), 3, Some(10), eoi, set_aside(3)),
            // A refused publication is the host's rule, not a fluke: set aside at once.
            (
                publish_refused(),
                1,
                None,
                eoi,
                SetAside("failed 1 times; last: publish-rule: IH013".into()),
            ),
            // Strategies that acknowledge a failure never retry it.
            (failed(true), 1, None, Strategy::AtMostOnce, Acknowledge),
            (Outcome::Locked, 1, None, Strategy::AtMostOnce, Acknowledge),
            (
                failed(false),
                1,
                None,
                Strategy::AtLeastOnce(CommitOn::Persist),
                Acknowledge,
            ),
            (
                Outcome::Locked,
                1,
                None,
                Strategy::AtLeastOnce(CommitOn::Persist),
                Acknowledge,
            ),
            (
                failed(true),
                1,
                None,
                Strategy::AtLeastOnce(CommitOn::Success),
                RetryAfter(MS(200)),
            ),
        ];
        for (outcome, attempts, max, strategy, expected) in table {
            assert_eq!(
                decide(&outcome, attempts, &policy(max), strategy),
                expected,
                "{outcome:?} attempt {attempts} max {max:?} {strategy}"
            );
        }
    }

    #[test]
    fn a_fatal_failure_never_waits_longer_than_the_cap() {
        let slow = RetryPolicy {
            backoff: Backoff {
                initial: Duration::from_secs(5),
                max: Duration::from_secs(60),
            },
            max_attempts: None,
            max_fatal_attempts: 10,
        };
        let step = decide(&failed(false), 4, &slow, Strategy::ExactlyOnceInbox);
        assert_eq!(step, Step::RetryAfter(FATAL_DELAY_CAP));
    }

    #[test]
    fn only_failures_that_may_be_retried_count_an_attempt() {
        assert!(counts_attempt(&failed(false), Strategy::ExactlyOnceInbox));
        assert!(!counts_attempt(
            &Outcome::Locked,
            Strategy::ExactlyOnceInbox
        ));
        assert!(!counts_attempt(&failed(true), Strategy::AtMostOnce));
        assert!(!counts_attempt(
            &failed(true),
            Strategy::AtLeastOnce(CommitOn::Persist)
        ));
    }

    #[test]
    fn backoff_doubles_from_the_initial_delay_up_to_the_maximum() {
        let backoff = Backoff {
            initial: MS(200),
            max: Duration::from_secs(1),
        };
        let delays: Vec<u128> = (1..=5).map(|a| backoff.delay(a).as_millis()).collect();
        assert_eq!(delays, [200, 400, 800, 1000, 1000]);
        assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(1));
    }
}
