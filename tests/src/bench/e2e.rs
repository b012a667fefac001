//! The release binary against a fresh topic, timed by samples of its own
//! counters from the first record handled to the last (the group join is left
//! out), with its CPU and memory.

use std::time::{Duration, Instant};

use inbox_host::embedded::LocalBroker;
use inbox_host::kafka::{self, OutgoingRecord};

use super::PARTITIONS;
use crate::host::Host;
use crate::{plugin, unique, TestDb};

/// What one end-to-end round measured.
pub struct Round {
    pub per_second: f64,
    pub cpu_us_per_message: f64,
    pub peak_rss_mb: f64,
}

/// One run of the binary: which plugin, with which flags (after `--plugin`,
/// `--group` and `--topic`), and whether the round ends only when the relay
/// has sent one published message per record.
pub struct Run<'a> {
    pub plugin: &'a str,
    pub flags: &'a [&'a str],
    pub relayed: bool,
    /// And only when the host has sent one request after commit per record
    /// (answered 2xx).
    pub requested: bool,
    /// More fields for every record's payload (a URL the plugin sends to).
    pub knobs: Option<&'a serde_json::Value>,
    /// The consumer group (`None`: a fresh one per round, named as its topic).
    pub group: Option<&'a str>,
    /// The time every record is stamped with (ms since the epoch; `None`: the
    /// time it is produced): the inbox partition its rows go to and, by its
    /// minute, which path their claims take (`bench::in_hour`).
    pub timestamp_ms: Option<i64>,
    /// The topic's partitions (`None`: `PARTITIONS`).
    pub partitions: Option<i32>,
}

/// Runs the binary over `messages` orders on a fresh topic of `PARTITIONS`
/// partitions.
pub async fn end_to_end(
    db: &TestDb,
    broker: &LocalBroker,
    run: &Run<'_>,
    messages: usize,
) -> Round {
    let topic = unique("bench");
    broker
        .create_topic(&topic, run.partitions.unwrap_or(PARTITIONS))
        .expect("topic");
    let timestamp_ms = run.timestamp_ms;
    let records: Vec<OutgoingRecord> = (0..messages)
        .map(|i| {
            let id = format!("{topic}-{i}");
            let mut payload = serde_json::json!({ "order_id": id, "amount": 1 });
            if let (Some(payload), Some(knobs)) = (
                payload.as_object_mut(),
                run.knobs.and_then(|k| k.as_object()),
            ) {
                payload.extend(knobs.clone());
            }
            OutgoingRecord {
                topic: topic.clone(),
                partition: None,
                timestamp_ms,
                key: Some(id.clone().into_bytes()),
                headers: vec![("message_id".into(), id.clone().into_bytes())],
                payload: payload.to_string().into_bytes(),
            }
        })
        .collect();
    let stamped_from = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
        .min(timestamp_ms.map_or(f64::MAX, |ms| ms as f64 / 1e3));
    kafka::produce(broker.bootstrap(), &records)
        .await
        .expect("produce");
    let plugin = plugin(run.plugin);
    let group = run.group.unwrap_or(&topic);
    let mut args = vec![
        "--plugin",
        plugin.to_str().expect("utf-8"),
        "--group",
        group,
        "--topic",
        &topic,
        "--status-addr",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(run.flags);
    let mut host = Host::spawn(
        &args,
        &[
            ("KAFKA_BROKERS", broker.bootstrap()),
            ("DATABASE_URL", &db.url),
            // The bound /metrics address is only in the app's start-up info line.
            ("RUST_LOG", "warn,inbox_host::app=info"),
        ],
    );
    // Progress from the host's own counters (a count(*) over the inbox every
    // few milliseconds would cost PostgreSQL more CPU than the host it
    // measures), read rarely (SAMPLE_EVERY) while most records are still to
    // come, so the scrapes are no load the in-process ceiling does not carry,
    // and often (SAMPLE_AT_THE_END) for the last tenth, so the end is seen
    // within a few milliseconds. Timed like the ceiling: from the first sample
    // with a record handled (its count exact) to the sample that sees the last,
    // the slowest partition's tail included.
    let progress = |host: &Host| {
        let handled = host
            .metric_sum("inbox_host_messages_total", "outcome=\"processed\"")
            .unwrap_or(0.0) as usize;
        let mut done = handled;
        if run.relayed {
            let relayed = host
                .metric("inbox_host_relay_messages_total")
                .unwrap_or(0.0) as usize;
            done = done.min(relayed);
        }
        if run.requested {
            let sent = host
                .metric_sum_of(
                    "inbox_host_http_requests_total",
                    &["purpose=\"after_commit\"", "outcome=\"2xx\""],
                )
                .unwrap_or(0.0) as usize;
            done = done.min(sent);
        }
        done
    };
    let started = Instant::now();
    let deadline = started + Duration::from_secs(600);
    let mut first: Option<Sample> = None;
    let last = loop {
        assert!(
            Instant::now() < deadline && host.is_running(),
            "stalled:\n{}",
            host.log()
        );
        let sample = Sample {
            done: progress(&host),
            at: Instant::now(),
            cpu: cpu_seconds(host.pid()),
        };
        if sample.done >= messages {
            break sample;
        }
        if sample.done > 0 {
            first.get_or_insert(sample);
        }
        let near_the_end = sample.done * 10 >= messages * 9;
        tokio::time::sleep(if near_the_end {
            SAMPLE_AT_THE_END
        } else {
            SAMPLE_EVERY
        })
        .await;
    };
    let Some(first) = first.filter(|first| first.done < messages / 2) else {
        panic!(
            "half the records were handled before the first sample ({:?} of {messages}, {:?} after the host started): raise BENCH_MESSAGES",
            first.map(|f| f.done),
            first.map(|f| f.at - started)
        )
    };
    let peak_rss_mb = peak_rss_mb(host.pid());
    // This round's rows: its records' topic, in the hours since they were
    // produced or stamped (the partitions of earlier hours are not read).
    let stored: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM inbox_host.inbox
         WHERE consumer_group = $1 AND topic = $2 AND record_at >= to_timestamp($3) - interval '1 minute'",
    )
    .bind(group)
    .bind(&topic)
    .bind(stamped_from)
    .fetch_one(&db.pool)
    .await
    .expect("count");
    assert_eq!(
        stored as usize, messages,
        "the host counted every record processed; the inbox must hold them all"
    );
    assert!(host.stop(), "{}", host.log());
    let counted = (messages - first.done) as f64;
    Round {
        per_second: counted / (last.at - first.at).as_secs_f64(),
        cpu_us_per_message: (last.cpu - first.cpu) * 1e6 / counted,
        peak_rss_mb,
    }
}

/// How often the round reads the host's progress from `/metrics`, and how
/// often once nine tenths of the records are handled.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);
const SAMPLE_AT_THE_END: Duration = Duration::from_millis(5);

/// The host's progress at one moment of a round.
#[derive(Clone, Copy)]
struct Sample {
    done: usize,
    at: Instant,
    cpu: f64,
}

/// CPU seconds this benchmark process has used so far.
pub fn own_cpu_seconds() -> f64 {
    cpu_seconds(std::process::id() as i32)
}

/// CPU seconds (user + system) the process has used so far.
pub fn cpu_seconds(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = fields
        .get(11)
        .and_then(|u| u.parse::<f64>().ok())
        .unwrap_or(0.0)
        + fields
            .get(12)
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(0.0);
    ticks / clock_ticks()
}

/// Clock ticks per second, the unit of /proc's CPU times (`getconf CLK_TCK`;
/// 100 on Linux unless the kernel says otherwise).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::LazyLock<f64> = std::sync::LazyLock::new(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    });
    *TICKS
}

/// The process's peak resident memory, in MB.
fn peak_rss_mb(pid: i32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}
