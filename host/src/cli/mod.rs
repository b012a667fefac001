//! The command line. Every flag can also come from the environment variable named
//! in its help; flags win over the environment.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod commands;
mod run;

pub use commands::{
    BuildArgs, DeadLettersArgs, DevArgs, LabArgs, LetterAction, LetterFilterArgs, NewArgs,
    RedriveArgs, RelayArgs, ShadowArgs,
};
pub use run::{CommitOnArg, RunArgs, StrategyArg, DEFAULT_LANE_LOOKAHEAD};

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
    /// Relay committed rows of inbox_host.outbox to Kafka, without consuming:
    /// for applications that insert outbox rows themselves (docs/outbox.md).
    /// One relay sends at a time per database; others stand by.
    Relay(RelayArgs),
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
