//! What the gate counts, per origin: requests answered by status class or
//! unanswered, refusals, their latency, the retries the sender schedules, and
//! the backlog of requests after commit as the sender last measured it.
//! `app/observe` writes them into `/metrics`.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

/// Why a request went through the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A call in the handler (`wasi:http`), its transaction open.
    Call,
    /// A request after commit, sent by the group's sender.
    AfterCommit,
}

impl Purpose {
    fn label(self) -> &'static str {
        match self {
            Purpose::Call => "call",
            Purpose::AfterCommit => "after_commit",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SentLabels {
    origin: String,
    purpose: &'static str,
    /// `2xx` … `5xx`, `no_answer`, or `refused` (by the gate, nothing sent).
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OriginLabels {
    origin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    origin: String,
    purpose: &'static str,
}

type Latency = Family<LatencyLabels, Histogram, fn() -> Histogram>;

/// Requests waiting to be sent to one origin, as last measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Backlog {
    pub origin: String,
    pub rows: i64,
    pub oldest_seconds: f64,
}

/// The gate's counts; one per host, shared by every sender and call.
#[derive(Debug)]
pub struct Stats {
    pub sent: Family<SentLabels, Counter>,
    pub retried: Family<OriginLabels, Counter>,
    pub latency: Latency,
    backlog: Mutex<Vec<Backlog>>,
}

impl Default for Stats {
    fn default() -> Self {
        fn buckets() -> Histogram {
            Histogram::new(exponential_buckets(0.001, 2.0, 16))
        }
        Self {
            sent: Family::default(),
            retried: Family::default(),
            latency: Family::new_with_constructor(buckets),
            backlog: Mutex::default(),
        }
    }
}

impl Stats {
    /// A request to `origin` ended after `took`: answered with `status`, or
    /// not (`None`: no answer; `refused`: the gate sent nothing).
    pub(super) fn ended(
        &self,
        origin: &str,
        purpose: Purpose,
        status: Option<u16>,
        refused: bool,
        took: Duration,
    ) {
        let outcome = match (refused, status) {
            (true, _) => "refused",
            (false, None) => "no_answer",
            (false, Some(s)) => match s / 100 {
                1 => "1xx",
                2 => "2xx",
                3 => "3xx",
                4 => "4xx",
                _ => "5xx",
            },
        };
        self.sent
            .get_or_create(&SentLabels {
                origin: origin.to_string(),
                purpose: purpose.label(),
                outcome,
            })
            .inc();
        if !refused {
            self.latency
                .get_or_create(&LatencyLabels {
                    origin: origin.to_string(),
                    purpose: purpose.label(),
                })
                .observe(took.as_secs_f64());
        }
    }

    /// The sender will try a request to `url`'s origin again.
    pub fn retried(&self, url: &str) {
        self.retried
            .get_or_create(&OriginLabels {
                origin: origin_of(url),
            })
            .inc();
    }

    /// The backlog as just measured (all hosts of the group together); an
    /// origin measured before and drained since reads 0, not absent.
    pub fn set_backlog(&self, mut backlog: Vec<Backlog>) {
        let mut kept = self.backlog.lock().unwrap_or_else(|e| e.into_inner());
        for drained in kept.drain(..) {
            if !backlog.iter().any(|b| b.origin == drained.origin) {
                backlog.push(Backlog {
                    origin: drained.origin,
                    rows: 0,
                    oldest_seconds: 0.0,
                });
            }
        }
        backlog.sort_by(|a, b| a.origin.cmp(&b.origin));
        *kept = backlog;
    }

    pub fn backlog(&self) -> Vec<Backlog> {
        self.backlog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// `scheme://host[:port]` of `url`, the label requests are counted under
/// (`invalid` for what is not a URL).
pub fn origin_of(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(parsed) if parsed.has_host() => parsed.origin().ascii_serialization(),
        _ => "invalid".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::origin_of;

    #[test]
    fn the_origin_drops_the_path_query_and_user() {
        assert_eq!(
            origin_of("https://user:pw@Pay.Example.com/v1/charges?x=1"),
            "https://pay.example.com"
        );
        assert_eq!(
            origin_of("http://127.0.0.1:8080/x"),
            "http://127.0.0.1:8080"
        );
        assert_eq!(origin_of("not a url"), "invalid");
    }
}
