//! The flags of each operator command.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::{user_cache_dir, CompileCacheArg, DatabaseArgs};

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
    /// Topics the version may publish to, as for `run`: what it would publish
    /// is counted per topic, never sent, and compared with what the live
    /// version published there.
    #[arg(
        long = "publish-topic",
        env = "INBOX_PUBLISH_TOPIC",
        value_delimiter = ','
    )]
    pub publish_topics: Vec<String>,
    /// Look for the live version's messages among the last N records of each
    /// partition of the publish topics.
    #[arg(long, default_value_t = 10_000)]
    pub publications_last: i64,
    /// The host's `--http-allow` rules, so that a request the live host would
    /// refuse is refused here too. Nothing is sent: requests after commit are
    /// counted per origin, and a record whose handler calls out is reported as
    /// not compared.
    #[arg(long = "http-allow", env = "INBOX_HTTP_ALLOW", value_delimiter = ',')]
    pub http_allow: Vec<String>,
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
    /// the lab never picks up KAFKA_BROKERS from the environment). The lab makes
    /// its topics there (one partition each) and deletes them at the end.
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

#[derive(Debug, Clone, Args)]
pub struct RelayArgs {
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Kafka bootstrap servers.
    #[arg(long, env = "KAFKA_BROKERS", default_value = "localhost:9092")]
    pub brokers: String,
    /// librdkafka connection properties, key=value (TLS, SASL), as for `run`.
    #[arg(long = "kafka-opt", env = "INBOX_KAFKA_OPTS", value_delimiter = ';')]
    pub kafka_opts: Vec<String>,
}
