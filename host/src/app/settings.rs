//! Turning command-line arguments into checked settings, with messages that say
//! what to pass.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};

use crate::cli::{CommitOnArg, RunArgs, StrategyArg};
use crate::inbox::{CommitOn, RunnerSettings, Strategy};
use crate::kafka::{self, ConsumerSettings, IdSources};
use crate::plugin::SandboxLimits;

use super::decide::{Backoff, RetryPolicy};
use super::PipelineLimits;

/// How long a rebalance waits for a revoked partition's batch to finish.
const REVOKE_GRACE: Duration = Duration::from_secs(10);

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
    /// PostgreSQL connections the host keeps.
    pub db_pool_size: u32,
    /// How long inbox rows are kept; `None` keeps them forever.
    pub inbox_retention: Option<Duration>,
}

impl RunSettings {
    pub fn from_args(args: RunArgs) -> anyhow::Result<Self> {
        let Some(plugin) = args.plugin else {
            bail!("no plugin given: pass --plugin path/to/handler.wasm or set INBOX_PLUGIN");
        };
        let Some(group) = args.group.filter(|g| !g.trim().is_empty()) else {
            bail!("no consumer group given: pass --group <name> or set INBOX_GROUP");
        };
        let topics: Vec<String> = args
            .topics
            .into_iter()
            .filter(|t| !t.trim().is_empty())
            .collect();
        if topics.is_empty() {
            bail!("no topic to consume: pass --topic <name> (repeatable) or set INBOX_TOPIC=a,b");
        }
        let Some(database_url) = args.database.database_url else {
            bail!("DATABASE_URL is not set: pass --database-url postgres://... or export DATABASE_URL");
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
        let extra = args
            .kafka_opts
            .iter()
            .filter(|o| !o.trim().is_empty())
            .map(|o| {
                o.split_once('=')
                    .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                    .with_context(|| format!("--kafka-opt `{o}` is not key=value (e.g. --kafka-opt security.protocol=ssl)"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        kafka::check_extra(&extra).map_err(anyhow::Error::msg)?;
        let id_sources: IdSources = args
            .message_id
            .parse()
            .map_err(|e: String| anyhow::anyhow!("--message-id: {e}"))?;
        let worker_id = args.worker_id.unwrap_or_else(default_worker_id);
        if args
            .inbox_retention_days
            .is_some_and(|d| !d.is_finite() || d <= 0.0)
        {
            bail!("--inbox-retention-days must be a positive number of days");
        }
        if args.retry_initial_ms == 0 || args.retry_max_ms < args.retry_initial_ms {
            bail!("--retry-initial-ms must be > 0 and <= --retry-max-ms");
        }
        if args.batch_max == 0 {
            bail!("--batch-max must be at least 1 (1 handles each record in its own transaction)");
        }
        if args.db_pool_size == 0 || args.concurrency == Some(0) {
            bail!("--db-pool-size and --concurrency must be at least 1");
        }
        if args.max_fatal_attempts == 0 {
            bail!("--max-fatal-attempts must be at least 1");
        }
        Ok(Self {
            plugin,
            database_url,
            consumer: ConsumerSettings {
                brokers: args.brokers,
                group: group.clone(),
                topics,
                id_sources,
                extra,
                revoke_grace: REVOKE_GRACE,
            },
            runner: RunnerSettings {
                group,
                worker_id,
                strategy,
                lock_timeout: Duration::from_millis(args.lock_timeout_ms.max(1)),
                statement_timeout: Duration::from_millis(args.statement_timeout_ms.max(1)),
                guest_role: Some(args.guest_role).filter(|r| !r.trim().is_empty()),
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
            },
            sandbox: SandboxLimits {
                deadline: Duration::from_millis(args.guest_deadline_ms.max(1)),
                memory_bytes: args.guest_memory_mib.max(1) << 20,
                ..SandboxLimits::default()
            },
            status_addr: args.status_addr.filter(|a| !a.trim().is_empty()),
            db_pool_size: args.db_pool_size,
            inbox_retention: args
                .inbox_retention_days
                .map(|days| Duration::from_secs_f64(days.max(0.0) * 86_400.0)),
        })
    }
}

/// `<host name>-<pid>`.
pub fn default_worker_id() -> String {
    format!(
        "{}-{}",
        gethostname::gethostname().to_string_lossy(),
        std::process::id()
    )
}
