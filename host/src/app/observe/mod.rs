//! Observability: `/metrics` and `/health` (`metrics`, `status`), what each
//! partition is doing (`progress`), OpenTelemetry spans per attempt (`traces`)
//! and the progress line in the log. Everything here reads what the consume
//! path reports; nothing here decides.

mod families;
mod http_metrics;
mod metrics;
mod progress;
mod relay_metrics;
mod sampled;
mod status;
mod traces;

pub use metrics::Metrics;
pub(crate) use progress::{LaneProgress, Tracked};
pub use status::serve;
pub(crate) use traces::Attempt;
pub use traces::Traces;

/// How often the progress line is logged.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// One info line every 30 s saying how the host is doing, instead of a line per
/// message (those are at debug).
pub async fn log_progress(metrics: std::sync::Arc<Metrics>) {
    let mut ticks = tokio::time::interval(PROGRESS_EVERY);
    ticks.tick().await;
    let mut last = metrics.totals();
    loop {
        ticks.tick().await;
        let now = metrics.totals();
        let processed = now.processed - last.processed;
        tracing::info!(
            processed,
            per_second = processed as f64 / PROGRESS_EVERY.as_secs_f64(),
            duplicates = now.duplicates - last.duplicates,
            failures = now.failures - last.failures,
            set_aside = now.set_aside - last.set_aside,
            lag = now.lag,
            partitions = now.partitions,
            "progress over the last 30 s"
        );
        last = now;
    }
}
