//! The command line. Every flag can also come from the environment variable named
//! in its help; flags win over the environment.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "inbox-host",
    version,
    about = "Runs a WebAssembly handler for a Kafka consumer group inside a PostgreSQL transactional inbox",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// How log lines are written to stderr: `text` (colour only on a terminal,
    /// never with NO_COLOR set) or `json` (one object per line).
    #[arg(long, global = true, env = "INBOX_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

// Parsed once at start; boxing the large variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Consume with a plugin (the default when no subcommand is given).
    Run(RunArgs),
    /// Apply the host's migrations (inbox and dead-letter tables) and exit.
    Migrate(DatabaseArgs),
    /// Validate a plugin offline: a component, of the handler world, instantiable in
    /// the sandbox. Prints its digest.
    Check {
        /// The plugin file to check.
        plugin: PathBuf,
        /// A checked plugin is left compiled in the cache, so the host loads it
        /// without compiling.
        #[command(flatten)]
        compile_cache: CompileCacheArg,
    },
    /// Build a plugin from its source folder (Rust, Python, JavaScript or
    /// TypeScript) into a component, installing the language's pinned toolchain
    /// on first use, then check it like `check`.
    Build(BuildArgs),
    /// Create a plugin folder in a language, ready for `build`.
    New(NewArgs),
    /// Run the reference lab: each acknowledgement strategy against a handler that
    /// writes an invoice and fails, plus the duplicate case.
    Lab(LabArgs),
    /// Start a throwaway PostgreSQL and a local Kafka-protocol broker for trying
    /// inbox-host out; prints the environment to use and runs until Ctrl-C.
    Dev(DevArgs),
    /// List, inspect and redrive dead letters: records set aside instead of
    /// handled (inbox_host.dead_letters).
    DeadLetters(DeadLettersArgs),
    /// Try a plugin version on the group's recent records without risk: each
    /// record runs in a transaction that is always rolled back, outside the
    /// group (no offset committed), beside what the live version did with it.
    /// Exits non-zero when the new version fails records the live one processed.
    Shadow(ShadowArgs),
}

#[derive(Debug, Args)]
pub struct ShadowArgs {
    /// The plugin version to try.
    #[arg(long)]
    pub plugin: PathBuf,
    /// The live consumer group whose records and inbox it is compared with.
    #[arg(long, env = "INBOX_GROUP")]
    pub group: String,
    /// The group's topics (repeat, or comma-separate in INBOX_TOPIC).
    #[arg(
        long = "topic",
        env = "INBOX_TOPIC",
        value_delimiter = ',',
        required = true
    )]
    pub topics: Vec<String>,
    /// Kafka bootstrap servers.
    #[arg(long, env = "KAFKA_BROKERS", default_value = "localhost:9092")]
    pub brokers: String,
    /// librdkafka connection properties, key=value (TLS, SASL), as for `run`.
    #[arg(long = "kafka-opt", env = "INBOX_KAFKA_OPTS", value_delimiter = ';')]
    pub kafka_opts: Vec<String>,
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Where message ids come from, as for `run`.
    #[arg(
        long,
        env = "INBOX_MESSAGE_ID",
        default_value = "header:message_id,header:event_id,json:event_id,coordinates"
    )]
    pub message_id: String,
    /// The role guest statements run under, as for `run`.
    #[arg(long, env = "INBOX_GUEST_ROLE", default_value = "inbox_guest")]
    pub guest_role: String,
    /// Try the last N records of each partition.
    #[arg(long, default_value_t = 100, conflicts_with = "from_offset")]
    pub last: i64,
    /// Try every record of each partition from this offset on instead.
    #[arg(long)]
    pub from_offset: Option<i64>,
    /// Failure examples to print per failure kind.
    #[arg(long, default_value_t = 3)]
    pub examples: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub compile_cache: CompileCacheArg,
}

#[derive(Debug, Args)]
pub struct DeadLettersArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub action: LetterAction,
}

#[derive(Debug, Subcommand)]
pub enum LetterAction {
    /// List dead letters not yet redriven, oldest first, with how many match.
    List {
        #[command(flatten)]
        filter: LetterFilterArgs,
        /// Show at most this many.
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// Show one dead letter: where it came from, why it was set aside, its key,
    /// headers and payload.
    Show {
        /// The letter's id (from `list`).
        id: i64,
    },
    /// Republish dead letters to their original topic (or --to-topic) with
    /// their key, headers and payload, so the group handles them again (once:
    /// a set-aside record has no inbox row). Each is marked with who redrove it
    /// and when; a letter already redriven is refused unless --again.
    Redrive(RedriveArgs),
}

/// Which letters: all filters must match.
#[derive(Debug, Clone, Default, Args)]
pub struct LetterFilterArgs {
    /// Only this consumer group's letters.
    #[arg(long)]
    pub group: Option<String>,
    /// Only letters from this topic.
    #[arg(long)]
    pub topic: Option<String>,
    /// Only letters whose reason contains this text (case-insensitive).
    #[arg(long)]
    pub reason: Option<String>,
    /// Only letters recorded since this time: RFC 3339 (2026-12-03T10:00:00Z)
    /// or an age (90s, 30m, 2h, 7d).
    #[arg(long)]
    pub since: Option<String>,
    /// Include letters already redriven.
    #[arg(long)]
    pub include_redriven: bool,
}

#[derive(Debug, Args)]
pub struct RedriveArgs {
    /// The letters to redrive, by id.
    pub ids: Vec<i64>,
    /// Redrive every letter the filters match (not yet redriven ones unless
    /// --include-redriven --again).
    #[arg(long, conflicts_with = "ids")]
    pub all: bool,
    #[command(flatten)]
    pub filter: LetterFilterArgs,
    /// Publish to this topic instead of each letter's original one.
    #[arg(long)]
    pub to_topic: Option<String>,
    /// Redrive letters that were redriven before.
    #[arg(long)]
    pub again: bool,
    /// Recorded as who redrove the letters (default: $USER@hostname).
    #[arg(long)]
    pub by: Option<String>,
    /// Kafka bootstrap servers.
    #[arg(long, env = "KAFKA_BROKERS", default_value = "localhost:9092")]
    pub brokers: String,
    /// librdkafka connection properties, key=value (TLS, SASL), as for `run`.
    #[arg(long = "kafka-opt", env = "INBOX_KAFKA_OPTS", value_delimiter = ';')]
    pub kafka_opts: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct DatabaseArgs {
    /// PostgreSQL URL, e.g. postgres://user@localhost/app.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
}

impl DatabaseArgs {
    /// The URL, or the error that says how to give one.
    pub fn required(&self) -> anyhow::Result<&str> {
        self.database_url.as_deref().ok_or_else(|| {
            anyhow::anyhow!(
                "DATABASE_URL is not set: pass --database-url postgres://... or export DATABASE_URL"
            )
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StrategyArg {
    AtMostOnce,
    AtLeastOnce,
    ExactlyOnceInbox,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CommitOnArg {
    OnPersist,
    OnSuccess,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The handler plugin (a wasm32-wasip2 component). Replacing the file, or
    /// SIGHUP, hot-swaps it.
    #[arg(long, env = "INBOX_PLUGIN")]
    pub plugin: Option<PathBuf>,
    /// Kafka consumer group; also the inbox's consumer_group key.
    #[arg(long, env = "INBOX_GROUP")]
    pub group: Option<String>,
    /// Topic to consume (repeat, or comma-separate in INBOX_TOPIC).
    #[arg(long = "topic", env = "INBOX_TOPIC", value_delimiter = ',')]
    pub topics: Vec<String>,
    /// Kafka bootstrap servers.
    #[arg(long, env = "KAFKA_BROKERS", default_value = "localhost:9092")]
    pub brokers: String,
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// When the offset is committed relative to the transaction.
    #[arg(
        long,
        env = "INBOX_STRATEGY",
        value_enum,
        default_value = "exactly-once-inbox"
    )]
    pub strategy: StrategyArg,
    /// For at-least-once: commit after every transaction (on-persist) or only
    /// successful ones (on-success).
    #[arg(
        long,
        env = "INBOX_COMMIT_ON",
        value_enum,
        default_value = "on-success"
    )]
    pub commit_on: CommitOnArg,
    /// Written on every inbox row; default: host name and process id.
    #[arg(long, env = "INBOX_WORKER_ID")]
    pub worker_id: Option<String>,
    /// Extra librdkafka property, key=value (repeatable; in INBOX_KAFKA_OPTS
    /// separate them with `;`, since values such as `debug=consumer,fetch` hold commas).
    #[arg(long = "kafka-opt", env = "INBOX_KAFKA_OPTS", value_delimiter = ';')]
    pub kafka_opts: Vec<String>,
    /// Where message ids come from, in order: header:NAME, json:FIELD, coordinates.
    #[arg(
        long,
        env = "INBOX_MESSAGE_ID",
        default_value = "header:message_id,header:event_id,json:event_id,coordinates"
    )]
    pub message_id: String,
    /// Records larger than this are set aside as dead letters instead of handled.
    #[arg(long, env = "INBOX_MAX_MESSAGE_BYTES", default_value_t = 1 << 20)]
    pub max_message_bytes: usize,
    /// Set a record aside as a dead letter after this many failures in a row
    /// (default: retry a retryable failure forever, holding its partition).
    #[arg(long, env = "INBOX_MAX_ATTEMPTS")]
    pub max_attempts: Option<u32>,
    /// Set a record aside after this many failures that waiting cannot fix (a
    /// rejected payload, a panic, a refused statement, a memory or stack limit).
    #[arg(long, env = "INBOX_MAX_FATAL_ATTEMPTS", default_value_t = 3)]
    pub max_fatal_attempts: u32,
    /// Most records of a partition handled in one transaction (1: one
    /// transaction per record).
    #[arg(long, env = "INBOX_BATCH_MAX", default_value_t = 100)]
    pub batch_max: usize,
    /// How long a partition's worker waits for more records to fill a batch, in ms.
    #[arg(long, env = "INBOX_BATCH_LINGER_MS", default_value_t = 5)]
    pub batch_linger_ms: u64,
    /// Most batches in flight at once across partitions (default: the pool size).
    #[arg(long, env = "INBOX_CONCURRENCY")]
    pub concurrency: Option<usize>,
    /// PostgreSQL connections the host keeps.
    #[arg(long, env = "INBOX_DB_POOL_SIZE", default_value_t = 8)]
    pub db_pool_size: u32,
    /// How long one attempt to reach PostgreSQL may take, in seconds. The host
    /// keeps trying while the database is down.
    #[arg(
        long = "connect-timeout",
        env = "INBOX_CONNECT_TIMEOUT",
        default_value_t = 10
    )]
    pub connect_timeout_secs: u64,
    /// Apply the host's migrations at start (`INBOX_MIGRATE=false` or
    /// `--no-migrate` for a login without DDL rights: run `inbox-host migrate`
    /// as an administrator instead; the host then checks the rights it needs).
    #[arg(long, env = "INBOX_MIGRATE", default_value_t = true, action = clap::ArgAction::Set)]
    pub migrate: bool,
    /// The same as `--migrate false`.
    #[arg(long)]
    pub no_migrate: bool,
    /// First retry delay after a failure, in milliseconds (doubles each time).
    #[arg(long, env = "INBOX_RETRY_INITIAL_MS", default_value_t = 200)]
    pub retry_initial_ms: u64,
    /// Longest retry delay, in milliseconds.
    #[arg(long, env = "INBOX_RETRY_MAX_MS", default_value_t = 30_000)]
    pub retry_max_ms: u64,
    /// How long to wait for another worker holding the same inbox row, in ms.
    #[arg(long, env = "INBOX_LOCK_TIMEOUT_MS", default_value_t = 2_000)]
    pub lock_timeout_ms: u64,
    /// Longest any statement may run, in ms.
    #[arg(long, env = "INBOX_STATEMENT_TIMEOUT_MS", default_value_t = 10_000)]
    pub statement_timeout_ms: u64,
    /// Longest a message's (or batch's) transaction may stay open, claim to
    /// commit, in ms: past it the handler is cancelled and everything rolls back,
    /// so no guest holds row locks longer (plus at most one statement timeout).
    #[arg(long, env = "INBOX_TRANSACTION_TIMEOUT_MS", default_value_t = 30_000)]
    pub transaction_timeout_ms: u64,
    /// The PostgreSQL role handler statements run under (SET LOCAL ROLE): grant it
    /// rights on your plugin's tables only. Created if missing and allowed. An
    /// empty value runs guests as the host's login: never do that in production.
    #[arg(long, env = "INBOX_GUEST_ROLE", default_value = "inbox_guest")]
    pub guest_role: String,
    /// Serve /metrics (Prometheus text: messages by outcome and failure kind, the
    /// active plugin digest) and /health on this address, e.g. 127.0.0.1:9464.
    #[arg(long, env = "INBOX_STATUS_ADDR")]
    pub status_addr: Option<String>,
    /// Delete inbox rows older than this many days (checked at start and hourly).
    /// Must outlive the topics' retention: a pruned row makes a redelivered old
    /// message new again (the host warns when it does not). Default: keep forever.
    #[arg(long, env = "INBOX_RETENTION_DAYS")]
    pub inbox_retention_days: Option<f64>,
    /// Longest a guest may run per message, in ms.
    #[arg(long, env = "INBOX_GUEST_DEADLINE_MS", default_value_t = 5_000)]
    pub guest_deadline_ms: u64,
    /// Most memory a guest may use for one message, in MiB: all its linear
    /// memories together.
    #[arg(long, env = "INBOX_GUEST_MEMORY_MIB", default_value_t = 64)]
    pub guest_memory_mib: usize,
    /// Keep a plugin's instance for its next message instead of a fresh one per
    /// message: much cheaper for Python and JavaScript guests, but the guest's
    /// globals and heap carry over between messages (docs/plugins.md). Each
    /// message still has its own transaction, deadline and output; an instance
    /// whose message failed in any way is discarded.
    #[arg(long, env = "INBOX_REUSE_INSTANCE")]
    pub reuse_instance: bool,
    /// The most bytes of parameters one guest statement may send (a message's
    /// statements together may send 16 times this).
    #[arg(long, env = "INBOX_MAX_PARAM_BYTES", default_value_t = 1 << 20)]
    pub max_param_bytes: usize,
    /// `/health/ready` says not ready when a partition with records waiting has
    /// made no progress for this many seconds (a poison record, a stuck handler).
    #[arg(long, env = "INBOX_STALL_AFTER_SECS", default_value_t = 60)]
    pub stall_after_secs: u64,
    /// Also publish every set-aside record to this topic (original key, value
    /// and headers plus `kafka_dlt-*` headers saying where it came from and
    /// why), acknowledged by all in-sync replicas before its offset is stored.
    #[arg(long, env = "INBOX_DEAD_LETTER_TOPIC")]
    pub dead_letter_topic: Option<String>,
    #[command(flatten)]
    pub compile_cache: CompileCacheArg,
}

/// Where compiled plugins are kept between loads.
#[derive(Debug, Clone, Args)]
pub struct CompileCacheArg {
    /// Keep compiled plugins here, by content, so a restart or a swap back to a
    /// known version loads in about a second instead of compiling again; `off`
    /// compiles on every load. It holds native code the host runs: only the
    /// host's user may write it, and it must be a folder of its own (wasmtime
    /// removes files it does not recognise there). Default:
    /// $XDG_CACHE_HOME/inbox-host/compiled (or ~/.cache/inbox-host/compiled).
    #[arg(long = "compile-cache", env = "INBOX_COMPILE_CACHE")]
    pub dir: Option<String>,
}

impl CompileCacheArg {
    /// The directory to use, or `None` when the cache is off (or no home
    /// directory is known to default to).
    pub fn dir(&self) -> Option<PathBuf> {
        match self.dir.as_deref().map(str::trim) {
            Some("off") => None,
            Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
            // Beside, not around, the toolchains: wasmtime's cache cleanup
            // deletes whatever it does not recognise in its folder.
            _ => user_cache_dir().map(|cache| cache.join("compiled")),
        }
    }
}

/// `$XDG_CACHE_HOME/inbox-host`, or `~/.cache/inbox-host` (`None`: no home).
pub fn user_cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|cache| cache.join("inbox-host"))
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The plugin's folder: a Rust crate (Cargo.toml), or handler.py,
    /// handler.js or handler.ts.
    #[arg(value_name = "DIR")]
    pub source: PathBuf,
    /// Where to write the component. Default: DIR/NAME.wasm, NAME being the folder's name.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Where pinned language toolchains (componentize-py, componentize-js) are
    /// installed on first use. Default: the user cache's inbox-host/toolchains.
    #[arg(long, env = "INBOX_TOOLCHAINS")]
    pub toolchains: Option<PathBuf>,
    /// The built plugin is checked, and left compiled in this cache.
    #[command(flatten)]
    pub compile_cache: CompileCacheArg,
}

impl BuildArgs {
    pub fn toolchains(&self) -> anyhow::Result<PathBuf> {
        self.toolchains
            .clone()
            .or_else(|| user_cache_dir().map(|c| c.join("toolchains")))
            .ok_or_else(|| anyhow::anyhow!("no home directory: pass --toolchains DIR"))
    }
}

#[derive(Debug, Args)]
pub struct NewArgs {
    /// The handler's language.
    #[arg(long)]
    pub lang: crate::toolchain::Language,
    /// The folder to create (new or empty).
    pub dir: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct LabArgs {
    /// Use this broker instead of starting a local one (only when given here:
    /// the lab never picks up KAFKA_BROKERS from the environment).
    #[arg(long)]
    pub brokers: Option<String>,
    /// Use this database instead of starting a throwaway cluster (only when
    /// given here: the lab never picks up DATABASE_URL from the environment). The
    /// lab applies the host's migrations and works in a schema of its own,
    /// dropped at the end.
    #[arg(long)]
    pub database_url: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct DevArgs {
    /// Topics to create on the local broker.
    #[arg(long = "topic", default_value = "orders", value_delimiter = ',')]
    pub topics: Vec<String>,
    /// Partitions per topic.
    #[arg(long, default_value_t = 3)]
    pub partitions: i32,
    /// Publish this many sample orders to the first topic once started.
    #[arg(long, default_value_t = 0)]
    pub sample_orders: u32,
    /// Start only the broker (use DATABASE_URL's database, or none).
    #[arg(long)]
    pub broker_only: bool,
    /// Write the environment (KAFKA_BROKERS=..., DATABASE_URL=...) to this file
    /// once everything is up.
    #[arg(long)]
    pub env_file: Option<PathBuf>,
}
