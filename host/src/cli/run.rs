//! The flags of the main job (`inbox-host --plugin … --group …`).

use clap::{Args, ValueEnum};

use std::path::PathBuf;

use super::{CompileCacheArg, DatabaseArgs};
use crate::inbox;

/// By default, the most records of a partition dispatched past its stored
/// offset to its key lanes: what stays in memory, and what a crash delivers
/// again at most.
pub const DEFAULT_LANE_LOOKAHEAD: usize = 1_000;

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
    /// Records larger than this are set aside as dead letters instead of handled;
    /// also the most bytes (key, value, headers) of a message a handler publishes.
    #[arg(long, env = "INBOX_MAX_MESSAGE_BYTES", default_value_t = crate::plugin::DEFAULT_MAX_MESSAGE_BYTES)]
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
    /// How long a revoked partition's batch (or, on SIGTERM, any batch) may
    /// still run, in ms; past it the batch is abandoned (its transaction rolls
    /// back, its records come again to the partition's next owner) so the
    /// rebalance or the exit does not wait for a slow handler. Less than
    /// `max.poll.interval.ms` (10000) less a second.
    #[arg(long, env = "INBOX_REVOKE_GRACE_MS", default_value_t = 5000)]
    pub revoke_grace_ms: u64,
    /// Lanes per partition: records are dispatched by a hash of their key, each
    /// lane runs its batches in its own transactions, one key's records in
    /// offset order; the partition's offset stored is the lowest record not yet
    /// done (docs/semantics.md, "Key lanes"). 1: one batch after another.
    #[arg(long, env = "INBOX_KEY_LANES", default_value_t = 1)]
    pub key_lanes: usize,
    /// Most records of a partition dispatched to its key lanes and not yet
    /// done: bounds memory, and what a crash delivers again for the inbox to skip.
    #[arg(long, env = "INBOX_LANE_LOOKAHEAD", default_value_t = DEFAULT_LANE_LOOKAHEAD)]
    pub lane_lookahead: usize,
    /// Most batches in flight at once across partitions and lanes (default: the pool size).
    #[arg(long, env = "INBOX_CONCURRENCY")]
    pub concurrency: Option<usize>,
    /// PostgreSQL connections the host keeps.
    #[arg(long, env = "INBOX_DB_POOL_SIZE", default_value_t = 8)]
    pub db_pool_size: u32,
    /// How long one attempt to reach PostgreSQL may take, in seconds (the host
    /// keeps trying while the database is down); also how long the host waits
    /// to learn whether the brokers accept its SASL credentials.
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
    #[arg(long, env = "INBOX_LOCK_TIMEOUT_MS", default_value_t = inbox::DEFAULT_LOCK_TIMEOUT_MS)]
    pub lock_timeout_ms: u64,
    /// Longest any statement may run, in ms.
    #[arg(long, env = "INBOX_STATEMENT_TIMEOUT_MS", default_value_t = inbox::DEFAULT_STATEMENT_TIMEOUT_MS)]
    pub statement_timeout_ms: u64,
    /// Longest a message's (or batch's) transaction may stay open, claim to
    /// commit, in ms: past it the handler is cancelled and everything rolls back,
    /// so no guest holds row locks longer (plus at most one statement timeout).
    #[arg(long, env = "INBOX_TRANSACTION_TIMEOUT_MS", default_value_t = inbox::DEFAULT_TRANSACTION_TIMEOUT_MS)]
    pub transaction_timeout_ms: u64,
    /// How far apart, in seconds, two records of one message id may be stamped
    /// across an hour boundary and still count as one message (within the same
    /// hour they always do; every redelivery of a record always does). Claims of
    /// records this close to an hour boundary take a slower path: 0 turns it off
    /// (docs/semantics.md). At most 1800.
    #[arg(long, env = "INBOX_RESEND_WINDOW_SECS", default_value_t = inbox::DEFAULT_RESEND_WINDOW_SECS)]
    pub resend_window_secs: u64,
    /// The PostgreSQL role handler statements run under (SET LOCAL ROLE): grant it
    /// rights on your plugin's tables only. Created if missing and allowed. An
    /// empty value runs guests as the host's login: never do that in production.
    #[arg(long, env = "INBOX_GUEST_ROLE", default_value = "inbox_guest")]
    pub guest_role: String,
    /// Serve /metrics (Prometheus text: messages by outcome and failure kind, the
    /// active plugin digest) and /health on this address, e.g. 127.0.0.1:9464.
    #[arg(long, env = "INBOX_STATUS_ADDR")]
    pub status_addr: Option<String>,
    /// Drop the inbox's hourly partitions of records older than this many days
    /// (checked at start and every ten minutes). Must outlive the topics'
    /// retention: a dropped row makes a redelivered old message new again (the
    /// host warns when it does not). Default: keep forever.
    #[arg(long, env = "INBOX_RETENTION_DAYS")]
    pub inbox_retention_days: Option<f64>,
    /// Delete dead letters recorded more than this many days ago (checked at
    /// start and every ten minutes). Default: keep them until redriven or
    /// deleted by an operator.
    #[arg(long, env = "INBOX_DEAD_LETTER_RETENTION_DAYS")]
    pub dead_letter_retention_days: Option<f64>,
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
    /// A topic handlers may publish to through the outbox (repeat, or
    /// comma-separate in INBOX_PUBLISH_TOPIC). None by default: a handler that
    /// publishes elsewhere fails for good, its record set aside.
    #[arg(
        long = "publish-topic",
        env = "INBOX_PUBLISH_TOPIC",
        value_delimiter = ','
    )]
    pub publish_topics: Vec<String>,
    /// The most messages a handler may publish for one record.
    #[arg(long, env = "INBOX_MAX_PUBLISH", default_value_t = crate::plugin::DEFAULT_MAX_PUBLISH)]
    pub max_publish: usize,
    /// The most bytes (keys, values and headers together) a handler may
    /// publish for one record: the host holds them until the record's
    /// transaction stores them (docs/outbox.md).
    #[arg(long, env = "INBOX_MAX_PUBLISH_BYTES", default_value_t = crate::plugin::DEFAULT_MAX_PUBLISH_BYTES)]
    pub max_publish_bytes: usize,
    /// A URL prefix or origin handlers may send requests to (repeat, or
    /// comma-separate in INBOX_HTTP_ALLOW): https unless the rule says http;
    /// loopback, private and link-local addresses only where a rule names the
    /// address itself. None by default (docs/effects.md).
    #[arg(long = "http-allow", env = "INBOX_HTTP_ALLOW", value_delimiter = ',')]
    pub http_allow: Vec<String>,
    /// The most requests a handler may ask for in one record's run.
    #[arg(long, env = "INBOX_HTTP_MAX_REQUESTS", default_value_t = crate::plugin::DEFAULT_MAX_REQUESTS)]
    pub http_max_requests: usize,
    /// The most bytes (URL, headers, body) of one request.
    #[arg(long, env = "INBOX_HTTP_MAX_REQUEST_BYTES", default_value_t = crate::plugin::DEFAULT_MAX_REQUEST_BYTES)]
    pub http_max_request_bytes: usize,
    /// The most bytes of a response the host reads (a reply carries at most this).
    #[arg(long, env = "INBOX_HTTP_MAX_RESPONSE_BYTES", default_value_t = 1 << 20)]
    pub http_max_response_bytes: usize,
    /// The longest one request may take, connecting included, in ms.
    #[arg(long, env = "INBOX_HTTP_TIMEOUT_MS", default_value_t = 10_000)]
    pub http_timeout_ms: u64,
    /// How long after its commit a request is still retried (`3600`, `90s`,
    /// `30m`, `1h`); a receiver must keep idempotency keys at least this long.
    #[arg(long, env = "INBOX_HTTP_RETRY_FOR", default_value = "1h")]
    pub http_retry_for: String,
    /// Requests in flight at once per origin, per host.
    #[arg(long, env = "INBOX_HTTP_CONCURRENCY", default_value_t = 8)]
    pub http_concurrency: usize,
    /// A PEM file of certificate authorities to trust besides the system's
    /// (a private CA).
    #[arg(long, env = "INBOX_HTTP_CA")]
    pub http_ca: Option<PathBuf>,
    /// A secret for header values, `NAME=env:VAR@RULE` (repeat, or
    /// comma-separate in INBOX_HTTP_SECRET): a header value's `{{secret:NAME}}`
    /// becomes VAR's value as the request is sent, only to URLs RULE allows;
    /// the guest never sees it (docs/effects.md).
    #[arg(long = "http-secret", env = "INBOX_HTTP_SECRET", value_delimiter = ',')]
    pub http_secret: Vec<String>,
    /// Do not relay outbox rows from this process (run `inbox-host relay`
    /// elsewhere). By default every host runs a relay; one sends at a time.
    #[arg(long, env = "INBOX_NO_RELAY")]
    pub no_relay: bool,
    /// Stop taking new records while this many outbox rows wait to be relayed
    /// (a broker outage holds them in the table): the consume side slows down
    /// instead of the outbox growing without bound.
    #[arg(long, env = "INBOX_MAX_OUTBOX_BACKLOG", default_value_t = 100_000)]
    pub max_outbox_backlog: i64,
    #[command(flatten)]
    pub compile_cache: CompileCacheArg,
}
