//! What is read, not counted, at each scrape: partitions and their lag, the
//! database pool, the plugin, the group, the outbox relay and the HTTP gate.

use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use sqlx::PgPool;

use super::families::{counter, gauge};
use super::progress::Partitions;
use crate::app::relay::RelayStatus;
use crate::egress::Gate;
use crate::kafka::GroupHealth;
use crate::plugin::PluginCell;

/// What is read, not counted, at each scrape.
#[derive(Default)]
pub(super) struct Sampled {
    pub(super) partitions: Arc<Partitions>,
    pub(super) pool: OnceLock<PgPool>,
    pub(super) plugin: OnceLock<PluginCell>,
    pub(super) group: OnceLock<GroupHealth>,
    pub(super) relay: OnceLock<Arc<RelayStatus>>,
    pub(super) gate: OnceLock<Arc<Gate>>,
}

impl std::fmt::Debug for Sampled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sampled")
    }
}

impl Collector for Sampled {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let views = self.partitions.views();
        gauge(
            &mut encoder,
            "inbox_host_assigned_partitions",
            "Partitions assigned to this host.",
            [(Vec::new(), views.len() as i64)],
        )?;
        gauge(
            &mut encoder,
            "inbox_host_consumer_lag",
            "Records produced to a partition and not yet handled (high watermark minus the next offset to handle), as of librdkafka's last statistics (5 s).",
            views.iter().filter_map(|v| {
                v.lag.map(|lag| (partition_labels(&v.topic, v.partition), lag))
            }),
        )?;
        gauge(
            &mut encoder,
            "inbox_host_held_record_attempts",
            "Failed attempts of the record a partition holds for retry (0: none held).",
            views.iter().map(|v| {
                (
                    partition_labels(&v.topic, v.partition),
                    i64::from(v.held_attempts),
                )
            }),
        )?;
        let lanes = self.partitions.lane_views();
        if !lanes.is_empty() {
            gauge(
                &mut encoder,
                "inbox_host_lane_busy",
                "Whether a key lane of a partition (--key-lanes) has a batch running (1) or not (0).",
                lanes.iter().map(|l| (lane_labels(&l.topic, l.partition, l.lane), i64::from(l.busy))),
            )?;
            gauge(
                &mut encoder,
                "inbox_host_lane_waiting_records",
                "Records dispatched to a key lane and not yet done (the batch running included).",
                lanes
                    .iter()
                    .map(|l| (lane_labels(&l.topic, l.partition, l.lane), l.waiting)),
            )?;
            gauge(
                &mut encoder,
                "inbox_host_lane_watermark_lag_records",
                "Records of a partition split into key lanes dispatched past its stored offset (done or not): what a crash now would deliver again, for the inbox to skip.",
                self.partitions
                    .lanes_ahead()
                    .into_iter()
                    .map(|((topic, partition), ahead)| (partition_labels(&topic, partition), ahead)),
            )?;
        }
        if let Some(pool) = self.pool.get() {
            let idle = pool.num_idle() as i64;
            gauge(
                &mut encoder,
                "inbox_host_db_connections",
                "Database pool connections by state.",
                [
                    (vec![("state", "idle".to_string())], idle),
                    (
                        vec![("state", "in_use".to_string())],
                        i64::from(pool.size()) - idle,
                    ),
                ],
            )?;
        }
        if let Some(cell) = self.plugin.get() {
            let counts = cell.counts();
            let current = cell.current();
            counter(
                &mut encoder,
                "inbox_host_plugin_swaps",
                "Plugin versions swapped in after start.",
                counts.swaps,
            )?;
            counter(
                &mut encoder,
                "inbox_host_plugin_rejections",
                "New plugin versions rejected (the active one kept running).",
                counts.rejections,
            )?;
            counter(
                &mut encoder,
                "inbox_host_plugin_reload_checks",
                "Times the plugin file was checked for a new version (a file event or SIGHUP), whatever was found.",
                counts.checks,
            )?;
            let mut info = encoder.encode_descriptor(
                "inbox_host_plugin",
                "The active plugin version (value 1).",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(1i64)
                .encode(info.encode_family(&vec![("digest", current.digest().to_string())])?)?;
            let seconds = current.runtime().guest_run_time().as_secs_f64();
            let guest = encoder.encode_descriptor("inbox_host_guest_run_seconds", "Time guests ran (wasm and WASI calls, not waits on queries), all messages together.", None, MetricType::Counter)?;
            ConstCounter::new(seconds).encode(guest)?;
        }
        let coordinator = self.group.get().map(GroupHealth::coordinator);
        if let Some(members) = coordinator.and_then(|c| c.members()) {
            gauge(
                &mut encoder,
                "inbox_host_group_members",
                "Members the group's coordinator lists (DescribeGroups, every 5 s); absent where the brokers do not answer it.",
                [(Vec::new(), members)],
            )?;
        }
        if let Some(listed) = coordinator.and_then(|c| c.listed()) {
            gauge(
                &mut encoder,
                "inbox_host_group_member_listed",
                "1 while the coordinator lists this member in its group, 0 while the group is stable without it; absent when not known.",
                [(Vec::new(), i64::from(listed))],
            )?;
        }
        if let Some(relay) = self.relay.get() {
            super::relay_metrics::encode(relay, &mut encoder)?;
        }
        if let Some(gate) = self.gate.get() {
            super::http_metrics::encode(gate.stats(), &mut encoder)?;
        }
        Ok(())
    }
}

fn partition_labels(topic: &str, partition: i32) -> Vec<(&'static str, String)> {
    vec![
        ("topic", topic.to_string()),
        ("partition", partition.to_string()),
    ]
}

fn lane_labels(topic: &str, partition: i32, lane: usize) -> Vec<(&'static str, String)> {
    let mut labels = partition_labels(topic, partition);
    labels.push(("lane", lane.to_string()));
    labels
}
