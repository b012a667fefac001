//! Calls beyond the database in `/metrics`: what went through the gate per
//! origin (egress/stats.rs), and the backlog of requests after commit.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::families::gauge;
use crate::egress::Stats;

pub(super) fn encode(
    stats: &Stats,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    stats.sent.encode(encoder.encode_descriptor(
        "inbox_host_http_requests",
        "HTTP requests through the gate, by origin, purpose (call: in the handler; after_commit: a request after commit) and outcome (status class, no_answer, or refused by the gate: nothing sent).",
        None,
        MetricType::Counter,
    )?)?;
    stats.retried.encode(encoder.encode_descriptor(
        "inbox_host_http_retries",
        "Requests after commit the sender scheduled to try again (408, 425, 429, 5xx, no answer), by origin.",
        None,
        MetricType::Counter,
    )?)?;
    stats.latency.encode(encoder.encode_descriptor(
        "inbox_host_http_request_duration_seconds",
        "Time from sending a request to the end of its answer's body (or the failure), by origin and purpose.",
        None,
        MetricType::Histogram,
    )?)?;
    let backlog = stats.backlog();
    gauge(
        encoder,
        "inbox_host_http_backlog_rows",
        "Requests after commit of the group waiting to be sent (all hosts' together), by origin, as the sender measured them each second.",
        backlog
            .iter()
            .map(|b| (vec![("origin", b.origin.clone())], b.rows)),
    )?;
    let mut oldest = encoder.encode_descriptor(
        "inbox_host_http_backlog_oldest_age_seconds",
        "Age of the oldest request after commit waiting for an origin (0: none), as measured each second.",
        None,
        MetricType::Gauge,
    )?;
    for b in &backlog {
        let labels = vec![("origin", b.origin.clone())];
        ConstGauge::new(b.oldest_seconds).encode(oldest.encode_family(&labels)?)?;
    }
    Ok(())
}
