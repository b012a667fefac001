//! When a request after commit is tried again: one pure function of (what came
//! back, attempts, schedule, jitter), tested as a table, like the records'
//! `decide`. Connection errors, timeouts and 408, 425, 429, 500, 502, 503, 504
//! are tried again with exponential backoff and jitter, honouring
//! `Retry-After` (capped); any other status is final.

use std::time::Duration;

/// How patiently a request is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// The wait after the first failure; doubled after each one after it.
    pub initial: Duration,
    /// The longest wait between attempts, and the most a `Retry-After` is honoured.
    pub max: Duration,
    /// How long after it was stored a request may still be tried
    /// (`--http-retry-for`); a receiver must keep keys at least this long.
    pub window: Duration,
}

impl Default for Schedule {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(300),
            window: Duration::from_secs(3600),
        }
    }
}

/// What came back from one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt<'a> {
    /// A response with this status and its `Retry-After`, if any.
    Answered {
        status: u16,
        retry_after: Option<&'a str>,
    },
    /// No response: the connection failed or the time per request ran out.
    NoAnswer,
}

/// What to do next with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// It is done (a final status, success or not: see [`is_success`]).
    Done,
    /// Try again after this long.
    RetryIn(Duration),
    /// Its retry window ran out: set it aside.
    GiveUp,
}

/// Statuses after which the same request may succeed later.
pub fn retries(status: u16) -> bool {
    matches!(status, 408 | 425 | 429 | 500 | 502 | 503 | 504)
}

/// Statuses that mean the receiver applied the request.
pub fn is_success(status: u16) -> bool {
    (200..300).contains(&status)
}

/// The one decision. `attempts` counts this request's attempts, this one
/// included; `age` is how long ago it was stored; `jitter` in [0, 1) spreads
/// the waits of requests that failed together (half the backoff to all of it).
pub fn next(
    attempt: &Attempt<'_>,
    attempts: u32,
    age: Duration,
    schedule: &Schedule,
    jitter: f64,
) -> Next {
    let wait = match attempt {
        Attempt::Answered { status, .. } if !retries(*status) => return Next::Done,
        Attempt::Answered {
            retry_after: Some(after),
            ..
        } => match retry_after(after) {
            Some(after) => after.min(schedule.max),
            None => backoff(attempts, schedule, jitter),
        },
        _ => backoff(attempts, schedule, jitter),
    };
    if age.saturating_add(wait) > schedule.window {
        Next::GiveUp
    } else {
        Next::RetryIn(wait)
    }
}

fn backoff(attempts: u32, schedule: &Schedule, jitter: f64) -> Duration {
    let factor = 2u32.saturating_pow(attempts.saturating_sub(1).min(20));
    let full = schedule.initial.saturating_mul(factor).min(schedule.max);
    full.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// `Retry-After` in seconds (an HTTP-date is read as "soon": the backoff applies).
fn retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn each_answer_attempt_and_age_leads_to_one_step() {
        use Next::*;
        let schedule = Schedule::default();
        let answered = |status| Attempt::Answered {
            status,
            retry_after: None,
        };
        let table: Vec<(Attempt<'_>, u32, Duration, f64, Next)> = vec![
            (answered(200), 1, S(0), 0.0, Done),
            (answered(201), 1, S(0), 0.0, Done),
            (answered(404), 1, S(0), 0.0, Done),
            (answered(400), 3, S(0), 0.0, Done),
            (answered(409), 1, S(0), 0.0, Done),
            (answered(500), 1, S(0), 1.0, RetryIn(S(1))),
            (
                answered(500),
                1,
                S(0),
                0.0,
                RetryIn(Duration::from_millis(500)),
            ),
            (answered(503), 3, S(0), 1.0, RetryIn(S(4))),
            (answered(502), 30, S(0), 1.0, RetryIn(S(300))),
            (answered(408), 1, S(0), 1.0, RetryIn(S(1))),
            (answered(425), 1, S(0), 1.0, RetryIn(S(1))),
            (answered(504), 1, S(0), 1.0, RetryIn(S(1))),
            (Attempt::NoAnswer, 2, S(0), 1.0, RetryIn(S(2))),
            // Retry-After is honoured as given, capped at the schedule's maximum.
            (
                Attempt::Answered {
                    status: 429,
                    retry_after: Some("2"),
                },
                1,
                S(0),
                0.0,
                RetryIn(S(2)),
            ),
            (
                Attempt::Answered {
                    status: 503,
                    retry_after: Some(" 7 "),
                },
                5,
                S(0),
                0.0,
                RetryIn(S(7)),
            ),
            (
                Attempt::Answered {
                    status: 429,
                    retry_after: Some("86400"),
                },
                1,
                S(0),
                0.0,
                RetryIn(S(300)),
            ),
            (
                Attempt::Answered {
                    status: 429,
                    retry_after: Some("Wed, 21 Oct 2026 07:28:00 GMT"),
                },
                1,
                S(0),
                1.0,
                RetryIn(S(1)),
            ),
            // A wait that would end past the window gives up.
            (answered(500), 1, S(3600), 1.0, GiveUp),
            (Attempt::NoAnswer, 1, S(3700), 0.0, GiveUp),
            (answered(200), 1, S(7200), 0.0, Done),
        ];
        for (attempt, attempts, age, jitter, expected) in table {
            assert_eq!(
                next(&attempt, attempts, age, &schedule, jitter),
                expected,
                "{attempt:?} attempt {attempts} age {age:?}"
            );
        }
    }

    #[test]
    fn only_2xx_is_success_and_only_the_transient_statuses_retry() {
        assert!(is_success(204) && !is_success(304) && !is_success(404));
        let retried: Vec<u16> = (100..600).filter(|s| retries(*s)).collect();
        assert_eq!(retried, [408, 425, 429, 500, 502, 503, 504]);
    }
}
