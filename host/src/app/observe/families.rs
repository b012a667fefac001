//! Writing one sampled family (a value read at scrape time) to the encoder.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

pub(super) fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (Vec<(&'static str, String)>, i64)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in samples {
        if labels.is_empty() {
            // One unlabelled sample (an empty label set would print `{}`).
            return ConstGauge::new(value).encode(family);
        }
        ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

pub(super) fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(value).encode(family)
}
