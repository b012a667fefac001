//! Turning command-line arguments into checked settings, with messages that say
//! what to pass.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;

use crate::cli::{CommitOnArg, RunArgs, StrategyArg};
use crate::egress::{AllowList, Gate, GateSettings, Schedule, Secrets};
use crate::inbox::{self, CommitOn, RunnerSettings, Strategy};
use crate::kafka::{self, ConsumerSettings, IdSources};
use crate::plugin::{PublishLimits, RequestLimits, SandboxLimits};

use super::consume::{Backoff, PipelineLimits, RetryPolicy};

/// Everything `inbox-host run` needs, checked.
#[derive(Debug, Clone)]
pub struct RunSettings {
    pub plugin: PathBuf,
    pub database_url: String,
    pub consumer: ConsumerSettings,
    pub runner: RunnerSettings,
    pub limits: PipelineLimits,
    pub sandbox: SandboxLimits,
    pub status_addr: Option<String>,
    /// A partition with records waiting and no progress this long makes the
    /// host not ready.
    pub stall_after: Duration,
    /// PostgreSQL connections the host keeps.
    pub db_pool_size: u32,
    /// How long one attempt to reach PostgreSQL may take.
    pub connect_timeout: Duration,
    /// Apply the host's migrations at start (else check they were applied and
    /// that the login has the rights it needs).
    pub migrate: bool,
    /// How long inbox rows are kept; `None` keeps them forever.
    pub inbox_retention: Option<Duration>,
    pub dead_letter_retention: Option<Duration>,
    /// Where compiled plugins are cached; `None`: compiled on every load.
    pub compile_cache: Option<PathBuf>,
    /// Where set-aside records are published too.
    pub dead_letter_topic: Option<String>,
    /// Run the outbox relay in this process.
    pub relay: bool,
    /// Requests after commit and calls in the handler: the gate and the
    /// sender's schedule.
    pub http: HttpSettings,
}

/// How requests after commit and calls in the handler are sent (`--http-*`).
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// The one gate both go through (also in `sandbox.requests`).
    pub gate: Arc<Gate>,
    pub schedule: Schedule,
    pub per_origin: usize,
}

impl RunSettings {
    /// Checks every flag; all problems are reported together, each saying what
    /// to pass instead.
    pub fn from_args(args: RunArgs) -> anyhow::Result<Self> {
        let mut problems = Vec::new();
        let plugin = args.plugin.clone().unwrap_or_default();
        if args.plugin.is_none() {
            problems.push(
                "no plugin given: pass --plugin path/to/handler.wasm or set INBOX_PLUGIN"
                    .to_string(),
            );
        } else if !plugin.is_file() {
            problems.push(format!(
                "the plugin {} does not exist or is not a file: check --plugin / INBOX_PLUGIN",
                plugin.display()
            ));
        }
        let group = args
            .group
            .clone()
            .filter(|g| !g.trim().is_empty())
            .unwrap_or_default();
        if group.is_empty() {
            problems.push(
                "no consumer group given: pass --group <name> or set INBOX_GROUP".to_string(),
            );
        }
        let topics: Vec<String> = args
            .topics
            .iter()
            .filter(|t| !t.trim().is_empty())
            .cloned()
            .collect();
        if topics.is_empty() {
            problems.push(
                "no topic to consume: pass --topic <name> (repeatable) or set INBOX_TOPIC=a,b"
                    .to_string(),
            );
        }
        if let Some(dlt) = args.dead_letter_topic.as_deref() {
            if topics.iter().any(|t| t == dlt) {
                problems.push(format!(
                    "--dead-letter-topic {dlt} is also a topic this group consumes: \
                     set-aside records would come back; name another topic"
                ));
            }
        }
        let database_url = match args.database.required() {
            Ok(url) => url.to_string(),
            Err(e) => {
                problems.push(e.to_string());
                String::new()
            }
        };
        let strategy = match (args.strategy, args.commit_on) {
            (StrategyArg::AtMostOnce, _) => Strategy::AtMostOnce,
            (StrategyArg::AtLeastOnce, CommitOnArg::OnPersist) => {
                Strategy::AtLeastOnce(CommitOn::Persist)
            }
            (StrategyArg::AtLeastOnce, CommitOnArg::OnSuccess) => {
                Strategy::AtLeastOnce(CommitOn::Success)
            }
            (StrategyArg::ExactlyOnceInbox, _) => Strategy::ExactlyOnceInbox,
        };
        let extra = kafka_options(&args.kafka_opts).unwrap_or_else(|bad| {
            problems.extend(bad);
            Vec::new()
        });
        if let Err(refused) = kafka::check_extra(&extra) {
            problems.push(refused);
        }
        let id_sources: IdSources = args.message_id.parse().unwrap_or_else(|e: String| {
            problems.push(format!("--message-id: {e}"));
            IdSources::default()
        });
        let publish_topics: Vec<String> = args
            .publish_topics
            .iter()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        for topic in &publish_topics {
            if let Err(why) = kafka::check_topic_name(topic) {
                problems.push(format!("--publish-topic {topic:?}: {why}"));
            }
            if topics.contains(topic) {
                problems.push(format!(
                    "--publish-topic {topic} is also a topic this group consumes: what the \
                     handler publishes would come back to it; name another topic"
                ));
            }
            if args.dead_letter_topic.as_deref().map(str::trim) == Some(topic.as_str()) {
                problems.push(format!(
                    "--publish-topic {topic} is also the --dead-letter-topic: a handler could \
                     publish records that pass for the host's dead letters; name another topic"
                ));
            }
        }
        let allow = AllowList::parse(&args.http_allow).unwrap_or_else(|bad| {
            problems.extend(bad);
            AllowList::default()
        });
        let secrets = Secrets::parse(&args.http_secret, |var| std::env::var(var).ok())
            .unwrap_or_else(|bad| {
                problems.extend(bad);
                Secrets::default()
            });
        let retry_for = parse_duration(&args.http_retry_for).unwrap_or_else(|| {
            problems.push(format!(
                "--http-retry-for {:?} is not a duration: give seconds or a number with s, m or h (e.g. 1h)",
                args.http_retry_for
            ));
            Duration::from_secs(3600)
        });
        if let Some(ca) = args.http_ca.as_deref().filter(|p| !p.is_file()) {
            problems.push(format!(
                "--http-ca {} does not exist or is not a file",
                ca.display()
            ));
        }
        let worker_id = args.worker_id.clone().unwrap_or_else(default_worker_id);
        let checks = [
            (
                args.inbox_retention_days
                    .is_some_and(|d| !d.is_finite() || d <= 0.0 || d > MAX_RETENTION_DAYS),
                "--inbox-retention-days must be a positive number of days, at most 36500",
            ),
            (
                args.dead_letter_retention_days
                    .is_some_and(|d| !d.is_finite() || d <= 0.0 || d > MAX_RETENTION_DAYS),
                "--dead-letter-retention-days must be a positive number of days, at most 36500",
            ),
            (
                args.retry_initial_ms == 0 || args.retry_max_ms < args.retry_initial_ms,
                "--retry-initial-ms must be > 0 and <= --retry-max-ms",
            ),
            (
                args.batch_max == 0,
                "--batch-max must be at least 1 (1 handles each record in its own transaction)",
            ),
            (
                args.db_pool_size == 0 || args.concurrency == Some(0),
                "--db-pool-size and --concurrency must be at least 1",
            ),
            (
                args.key_lanes == 0 || args.key_lanes > MAX_KEY_LANES,
                "--key-lanes must be at least 1 and at most 1024",
            ),
            (
                args.key_lanes > 1 && args.lane_lookahead < args.key_lanes,
                "--lane-lookahead must be at least --key-lanes (each lane needs a record ahead to run)",
            ),
            (
                args.key_lanes > 1 && strategy.commits_before(),
                "--key-lanes above 1 cannot be combined with --strategy at-most-once: it commits a batch's offset before handling, and a lane's batch is not the partition's next records; use exactly-once-inbox (the default) or at-least-once",
            ),
            (
                args.max_fatal_attempts == 0,
                "--max-fatal-attempts must be at least 1",
            ),
            (
                args.connect_timeout_secs == 0 || args.connect_timeout_secs > MAX_SECS,
                "--connect-timeout must be at least 1 second and at most 86400",
            ),
            (
                args.stall_after_secs > MAX_SECS,
                "--stall-after-secs must be at most 86400",
            ),
            (
                args.resend_window_secs > inbox::MAX_RESEND_WINDOW_SECS,
                "--resend-window-secs must be at most 1800 (a claim looks into the neighbouring hours only)",
            ),
            (
                args.guest_memory_mib > 4096,
                "--guest-memory-mib must be at most 4096 (a wasm32 memory holds 4 GiB)",
            ),
            (
                args.max_message_bytes > MAX_BYTES
                    || args.max_param_bytes > MAX_BYTES
                    || args.max_publish_bytes > MAX_BYTES,
                "--max-message-bytes, --max-param-bytes and --max-publish-bytes must be at most 1073741824 (1 GiB)",
            ),
            (
                args.max_publish_bytes == 0,
                "--max-publish-bytes must be at least 1",
            ),
            (
                args.http_max_request_bytes > MAX_BYTES || args.http_max_response_bytes > MAX_BYTES,
                "--http-max-request-bytes and --http-max-response-bytes must be at most 1073741824 (1 GiB)",
            ),
            (
                args.http_concurrency == 0 || args.http_timeout_ms == 0,
                "--http-concurrency and --http-timeout-ms must be at least 1",
            ),
            (
                args.revoke_grace_ms + kafka::REVOKE_MARGIN_MS >= max_poll_interval_ms(&extra),
                "--revoke-grace-ms must be less than max.poll.interval.ms (10000, or as --kafka-opt sets it) less a second: the coordinator waits no longer for a member to rejoin a rebalance",
            ),
        ];
        let millis = [
            ("--lock-timeout-ms", args.lock_timeout_ms),
            ("--statement-timeout-ms", args.statement_timeout_ms),
            ("--transaction-timeout-ms", args.transaction_timeout_ms),
            ("--guest-deadline-ms", args.guest_deadline_ms),
            ("--batch-linger-ms", args.batch_linger_ms),
            ("--retry-initial-ms", args.retry_initial_ms),
            ("--retry-max-ms", args.retry_max_ms),
        ];
        problems.extend(millis.iter().filter(|(_, ms)| *ms > MAX_MILLIS).map(|(flag, _)| {
            format!("{flag} must be at most {MAX_MILLIS} (PostgreSQL's limit for a timeout, about 24 days)")
        }));
        problems.extend(
            checks
                .iter()
                .filter(|(bad, _)| *bad)
                .map(|(_, why)| why.to_string()),
        );
        if !problems.is_empty() {
            bail!("{}", problems.join("\n  "));
        }
        let allow = Arc::new(allow);
        let gate = Gate::new(GateSettings {
            allow: allow.clone(),
            timeout: Duration::from_millis(args.http_timeout_ms.min(MAX_MILLIS)),
            max_response_bytes: args.http_max_response_bytes,
            extra_ca: args.http_ca.clone(),
            secrets: Arc::new(secrets),
        })
        .map(Arc::new)
        .map_err(anyhow::Error::msg)?;
        let requests = RequestLimits {
            group: group.clone(),
            allow,
            max_requests: args.http_max_requests,
            max_request_bytes: args.http_max_request_bytes,
            reply_topics: publish_topics.clone(),
            gate: Some(gate.clone()),
        };
        Ok(Self {
            plugin,
            database_url,
            consumer: ConsumerSettings {
                brokers: args.brokers,
                group: group.clone(),
                topics,
                id_sources,
                extra,
                revoke_grace: Duration::from_millis(args.revoke_grace_ms),
            },
            runner: RunnerSettings {
                group,
                worker_id,
                strategy,
                lock_timeout: Duration::from_millis(args.lock_timeout_ms.max(1)),
                statement_timeout: Duration::from_millis(args.statement_timeout_ms.max(1)),
                transaction_timeout: Duration::from_millis(args.transaction_timeout_ms.max(1)),
                guest_role: Some(args.guest_role).filter(|r| !r.trim().is_empty()),
                resend_window: Duration::from_secs(args.resend_window_secs),
            },
            limits: PipelineLimits {
                max_message_bytes: args.max_message_bytes,
                retry: RetryPolicy {
                    backoff: Backoff {
                        initial: Duration::from_millis(args.retry_initial_ms),
                        max: Duration::from_millis(args.retry_max_ms),
                    },
                    max_attempts: args.max_attempts.filter(|n| *n > 0),
                    max_fatal_attempts: args.max_fatal_attempts,
                },
                batch_max: args.batch_max,
                batch_linger: Duration::from_millis(args.batch_linger_ms),
                concurrency: args.concurrency.unwrap_or(args.db_pool_size as usize),
                max_outbox_backlog: args.max_outbox_backlog.max(1),
                key_lanes: args.key_lanes,
                lane_lookahead: args.lane_lookahead,
            },
            sandbox: SandboxLimits {
                deadline: Duration::from_millis(args.guest_deadline_ms.max(1)),
                memory_bytes: args.guest_memory_mib.max(1) << 20,
                max_param_bytes: args.max_param_bytes.max(1),
                reuse_instance: args.reuse_instance,
                publish: PublishLimits {
                    topics: publish_topics,
                    max_messages: args.max_publish,
                    max_message_bytes: args.max_message_bytes,
                    max_record_bytes: args.max_publish_bytes,
                },
                requests,
                ..SandboxLimits::default()
            },
            relay: !args.no_relay,
            http: HttpSettings {
                gate,
                schedule: Schedule {
                    window: retry_for,
                    ..Schedule::default()
                },
                per_origin: args.http_concurrency,
            },
            status_addr: args.status_addr.filter(|a| !a.trim().is_empty()),
            stall_after: Duration::from_secs(args.stall_after_secs.max(1)),
            compile_cache: args.compile_cache.dir(),
            dead_letter_topic: args
                .dead_letter_topic
                .clone()
                .filter(|t| !t.trim().is_empty()),
            db_pool_size: args.db_pool_size,
            connect_timeout: Duration::from_secs(args.connect_timeout_secs),
            migrate: args.migrate && !args.no_migrate,
            inbox_retention: args.inbox_retention_days.map(days),
            dead_letter_retention: args.dead_letter_retention_days.map(days),
        })
    }
}

/// Bounds of the operator's numbers: past them a flag is refused with its
/// range instead of overflowing a time or a size later.
const MAX_RETENTION_DAYS: f64 = 36_500.0;

/// `3600`, `90s`, `30m`, `1h` as a duration.
fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let n: u64 = number.parse().ok()?;
    let secs = match unit.trim() {
        "s" => n,
        "m" => n.checked_mul(60)?,
        "h" => n.checked_mul(3600)?,
        _ => return None,
    };
    Some(Duration::from_secs(secs))
}

/// A checked number of days as a duration.
fn days(days: f64) -> Duration {
    Duration::from_secs_f64(days.max(0.0) * 86_400.0)
}
const MAX_MILLIS: u64 = i32::MAX as u64;
const MAX_SECS: u64 = 86_400;
const MAX_BYTES: usize = 1 << 30;
const MAX_KEY_LANES: usize = 1_024;

/// `<host name>-<pid>`.
pub fn default_worker_id() -> String {
    format!(
        "{}-{}",
        gethostname::gethostname().to_string_lossy(),
        std::process::id()
    )
}

/// `--kafka-opt key=value` options as pairs, or what is wrong with each bad one.
/// `max.poll.interval.ms` as the member will have it: the host's, or the one
/// `--kafka-opt` sets (`extra`, as parsed).
fn max_poll_interval_ms(extra: &[(String, String)]) -> u64 {
    extra
        .iter()
        .find(|(k, _)| k == "max.poll.interval.ms")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(kafka::MAX_POLL_INTERVAL_MS)
}

pub(crate) fn kafka_options(options: &[String]) -> Result<Vec<(String, String)>, Vec<String>> {
    let (mut pairs, mut bad) = (Vec::new(), Vec::new());
    for option in options.iter().filter(|o| !o.trim().is_empty()) {
        match option.split_once('=') {
            Some((k, v)) => pairs.push((k.trim().to_string(), v.trim().to_string())),
            None => bad.push(format!(
                "--kafka-opt `{option}` is not key=value (e.g. --kafka-opt security.protocol=ssl)"
            )),
        }
    }
    if bad.is_empty() {
        Ok(pairs)
    } else {
        Err(bad)
    }
}
