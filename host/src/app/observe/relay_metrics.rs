//! The outbox relay's side of `/metrics` and `/health/ready`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::families::{counter, gauge};
use crate::app::relay::RelayStatus;

/// Writes the relay's samples: backlog, oldest age, sent, errors, leadership.
pub(super) fn encode(
    status: &RelayStatus,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    gauge(
        encoder,
        "inbox_host_outbox_backlog_rows",
        "Rows in inbox_host.outbox waiting to be relayed, as measured each second (all hosts' together).",
        [(Vec::new(), status.backlog_rows.load(Ordering::Relaxed))],
    )?;
    let oldest = encoder.encode_descriptor(
        "inbox_host_outbox_oldest_age_seconds",
        "Age of the oldest row waiting in inbox_host.outbox (0: none), as measured each second.",
        None,
        MetricType::Gauge,
    )?;
    ConstGauge::new(status.oldest_ms.load(Ordering::Relaxed) as f64 / 1000.0).encode(oldest)?;
    gauge(
        encoder,
        "inbox_host_relay_leading",
        "1 while this process's relay holds the relay lock and sends; 0 while it stands by.",
        [(
            Vec::new(),
            i64::from(status.leading.load(Ordering::Relaxed)),
        )],
    )?;
    counter(
        encoder,
        "inbox_host_relay_messages",
        "Outbox messages this process relayed: acknowledged by the broker, their rows deleted.",
        status.sent.load(Ordering::Relaxed),
    )?;
    counter(
        encoder,
        "inbox_host_relay_errors",
        "Messages the broker refused, and database errors of the relay.",
        status.errors.load(Ordering::Relaxed),
    )
}

/// Why the relay makes the host not ready: it has been unable to send for
/// `stall_after`.
pub(super) fn not_ready(status: &RelayStatus, stall_after: Duration) -> Option<String> {
    let (for_, why) = status.stuck(stall_after)?;
    (for_ >= stall_after).then(|| {
        format!(
            "the outbox relay has not been able to send for {} s: {why}",
            for_.as_secs()
        )
    })
}
