//! What the host counts and measures, in Prometheus' data model: counters and
//! histograms updated as records are handled, and values sampled at each
//! scrape (`sampled.rs`: lag, pool, plugin, relay). Names follow Prometheus'
//! conventions; each has its HELP text; docs/operations.md lists them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use sqlx::PgPool;

use super::progress::Partitions;
use super::sampled::Sampled;
use crate::app::relay::RelayStatus;
use crate::inbox::{FailureKind, Outcome};
use crate::kafka::GroupHealth;
use crate::plugin::PluginCell;

/// `outcome`, and `kind` for failures only.
type OutcomeLabels = Vec<(&'static str, &'static str)>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabels {
    topic: String,
    partition: i32,
}

/// The host's metrics and the state `/health/ready` reads.
pub struct Metrics {
    registry: Registry,
    messages: Family<OutcomeLabels, Counter>,
    dead_letters: Family<KindLabels, Counter>,
    worker_restarts: Family<PartitionLabels, Counter>,
    batch_size: Histogram,
    transaction_seconds: Histogram,
    end_to_end_seconds: Histogram,
    sampled: Arc<Sampled>,
    database_down: AtomicBool,
    /// Totals by outcome for the periodic progress line.
    counts: Counts,
}

#[derive(Default)]
struct Counts {
    processed: AtomicU64,
    duplicates: AtomicU64,
    failures: AtomicU64,
    set_aside: AtomicU64,
}

/// What the progress line reports: totals since start and the lag now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub processed: u64,
    pub duplicates: u64,
    pub failures: u64,
    pub set_aside: u64,
    pub lag: i64,
    pub partitions: usize,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let messages = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "inbox_host_messages",
            "Records by outcome (processed, duplicate, locked, failed, set_aside) and failure kind",
            messages.clone(),
        );
        let dead_letters = Family::<KindLabels, Counter>::default();
        registry.register(
            "inbox_host_dead_letters",
            "Records set aside in inbox_host.dead_letters, by the failure kind that set them aside (or unusable)",
            dead_letters.clone(),
        );
        let worker_restarts = Family::<PartitionLabels, Counter>::default();
        registry.register(
            "inbox_host_worker_restarts",
            "Partition workers restarted in place after a panic inside their own recovery (their records kept, none skipped)",
            worker_restarts.clone(),
        );
        let batch_size = Histogram::new(exponential_buckets(1.0, 2.0, 10));
        registry.register(
            "inbox_host_batch_size",
            "Records handed to the runner per transaction",
            batch_size.clone(),
        );
        let transaction_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register(
            "inbox_host_transaction_duration_seconds",
            "Time the runner took for one batch, from its inbox claim to its commit or rollback (a replay after a failure included)",
            transaction_seconds.clone(),
        );
        let end_to_end_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 20));
        registry.register(
            "inbox_host_end_to_end_latency_seconds",
            "Time from a record's Kafka timestamp to the commit of its effects",
            end_to_end_seconds.clone(),
        );
        registry.register(
            "inbox_host_build_info",
            "The running build (value 1)",
            build_info(),
        );
        let sampled = Arc::new(Sampled::default());
        registry.register_collector(Box::new(sampled.clone()));
        Self {
            registry,
            messages,
            dead_letters,
            worker_restarts,
            batch_size,
            transaction_seconds,
            end_to_end_seconds,
            sampled,
            database_down: AtomicBool::new(false),
            counts: Counts::default(),
        }
    }

    pub fn partitions(&self) -> Arc<Partitions> {
        self.sampled.partitions.clone()
    }

    pub fn watch_pool(&self, pool: PgPool) {
        let _ = self.sampled.pool.set(pool);
    }

    pub fn watch_plugin(&self, cell: PluginCell) {
        let _ = self.sampled.plugin.set(cell);
    }

    /// Follow the outbox relay and backlog.
    pub fn watch_relay(&self, status: Arc<RelayStatus>) {
        let _ = self.sampled.relay.set(status);
    }

    /// Count what goes through the HTTP gate.
    pub fn watch_gate(&self, gate: Arc<crate::egress::Gate>) {
        let _ = self.sampled.gate.set(gate);
    }

    /// Follow the group member's view of its group and brokers.
    pub fn watch_kafka(&self, group: GroupHealth) {
        let _ = self.sampled.group.set(group);
    }

    /// Whether the database answers (set while waiting for it at start, and by
    /// each batch: a lost connection, or a commit).
    pub fn database_reachable(&self, reachable: bool) {
        self.database_down.store(!reachable, Ordering::SeqCst);
    }

    /// Why the host is not ready; empty when it is. Partitions with records
    /// waiting that made no progress for `stall_after` count as a reason.
    pub fn not_ready(&self, stall_after: Duration) -> Vec<String> {
        let mut reasons = Vec::new();
        if self.database_down.load(Ordering::SeqCst) {
            reasons.push("PostgreSQL unreachable".to_string());
        }
        match self.sampled.group.get() {
            None => reasons.push("starting: not yet consuming".to_string()),
            Some(group) if !group.brokers_reachable() => {
                reasons.push("Kafka unreachable".to_string())
            }
            Some(group) if !group.joined() => {
                reasons.push("not yet joined the consumer group".to_string())
            }
            Some(group) if group.outside_group() => reasons.push(format!(
                "outside the consumer group (or stuck joining) for longer than {} s",
                crate::kafka::NOTICE_AFTER.as_secs()
            )),
            Some(_) => {}
        }
        reasons.extend(self.sampled.partitions.stalled(stall_after));
        if let Some(relay) = self.sampled.relay.get() {
            reasons.extend(super::relay_metrics::not_ready(relay, stall_after));
        }
        reasons
    }

    pub fn record(&self, outcome: &Outcome) {
        match outcome {
            Outcome::Failed(e) if e.kind == FailureKind::Database => self.database_reachable(false),
            o if o.committed() => self.database_reachable(true),
            _ => {}
        }
        let counts = &self.counts;
        let (labels, total): (OutcomeLabels, Option<&AtomicU64>) = match outcome {
            Outcome::Failed(e) => (
                vec![("outcome", "failed"), ("kind", e.kind.as_str())],
                Some(&counts.failures),
            ),
            Outcome::Processed => (vec![("outcome", "processed")], Some(&counts.processed)),
            Outcome::Duplicate => (vec![("outcome", "duplicate")], Some(&counts.duplicates)),
            Outcome::SetAside(_) => (vec![("outcome", "set_aside")], Some(&counts.set_aside)),
            Outcome::Locked => (vec![("outcome", "locked")], None),
        };
        self.messages.get_or_create(&labels).inc();
        if let Some(total) = total {
            total.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn totals(&self) -> Totals {
        let views = self.sampled.partitions.views();
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        Totals {
            processed: get(&self.counts.processed),
            duplicates: get(&self.counts.duplicates),
            failures: get(&self.counts.failures),
            set_aside: get(&self.counts.set_aside),
            lag: views.iter().filter_map(|v| v.lag).sum(),
            partitions: views.len(),
        }
    }

    /// A record was set aside; `kind` is the failure kind, or `unusable`.
    pub fn dead_letter(&self, kind: &'static str) {
        self.dead_letters.get_or_create(&KindLabels { kind }).inc();
    }

    /// The worker of `topic`-`partition` was restarted in place.
    pub fn worker_restarted(&self, topic: &str, partition: i32) {
        let labels = PartitionLabels {
            topic: topic.to_string(),
            partition,
        };
        self.worker_restarts.get_or_create(&labels).inc();
    }

    /// A transaction of `size` records took `took`, claim to end.
    pub fn transaction(&self, size: usize, took: Duration) {
        self.batch_size.observe(size as f64);
        self.transaction_seconds.observe(took.as_secs_f64());
    }

    /// A record produced at `timestamp_ms` is committed now.
    pub fn committed_record(&self, timestamp_ms: Option<i64>) {
        let Some(at) = timestamp_ms else { return };
        let now = chrono::Utc::now().timestamp_millis();
        if now >= at {
            self.end_to_end_seconds.observe((now - at) as f64 / 1000.0);
        }
    }

    /// The OpenMetrics text exposition.
    pub fn render_openmetrics(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// The Prometheus text exposition (format 0.0.4), what scrapers and
    /// `promtool` read when they do not ask for OpenMetrics.
    pub fn render_prometheus(&self) -> String {
        prometheus_text(&self.render_openmetrics())
    }
}

fn build_info() -> Family<Vec<(&'static str, String)>, Gauge> {
    let family = Family::<Vec<(&'static str, String)>, Gauge>::default();
    let librdkafka = crate::kafka::librdkafka_version();
    family
        .get_or_create(&vec![
            ("version", env!("CARGO_PKG_VERSION").to_string()),
            ("commit", env!("INBOX_HOST_COMMIT").to_string()),
            ("wasmtime", env!("INBOX_HOST_WASMTIME").to_string()),
            ("librdkafka", librdkafka),
        ])
        .set(1);
    family
}

/// OpenMetrics text as Prometheus text 0.0.4: the two differ, for what this
/// host exposes, only in that a counter's family is named with its `_total`
/// suffix, and in the `# UNIT` and `# EOF` lines.
fn prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                if counters.contains(name) {
                    out.push_str(&format!("{prefix}{name}_total {tail}\n"));
                } else {
                    out.push_str(line);
                    out.push('\n');
                }
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::prometheus_text;

    #[test]
    fn openmetrics_counters_become_prometheus_total_families() {
        let openmetrics = "# HELP x Things.\n# TYPE x counter\nx_total{a=\"b\"} 1\n# HELP g G.\n# TYPE g gauge\ng 2\n# EOF\n";
        assert_eq!(
            prometheus_text(openmetrics),
            "# HELP x_total Things.\n# TYPE x_total counter\nx_total{a=\"b\"} 1\n# HELP g G.\n# TYPE g gauge\ng 2\n"
        );
    }
}
