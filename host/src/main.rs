use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use inbox_host::app::{self, RunSettings};
use inbox_host::cli::{Cli, Command};
use inbox_host::telemetry;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = match Cli::from_arg_matches(&Cli::command().version(version()).get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    telemetry::init(cli.log_format);
    let result = match cli.command.unwrap_or(Command::Run(cli.run)) {
        Command::Run(args) => match RunSettings::from_args(args) {
            Ok(settings) => app::run(settings, shutdown_signal()).await,
            Err(e) => Err(e),
        },
        Command::Migrate(db) => match db.required() {
            Ok(url) => app::migrate(url)
                .await
                .map(|()| println!("migrations applied")),
            Err(e) => Err(e),
        },
        Command::Check {
            plugin,
            compile_cache,
        } => app::check(&plugin, compile_cache.dir().as_deref())
            .await
            .map(|digest| {
                println!(
                    "ok: {} is a valid inbox:host/handler plugin",
                    plugin.display()
                );
                println!("digest: {digest}");
            }),
        Command::Build(args) => app::build(&args).await.map(|(built, digest)| {
            println!("built: {}", built.display());
            println!("digest: {digest}");
        }),
        Command::New(args) => inbox_host::toolchain::scaffold(args.lang, &args.dir).map(|()| {
            println!(
                "created a {} plugin in {}; build it with `inbox-host build {}`",
                args.lang.name(),
                args.dir.display(),
                args.dir.display()
            );
        }),
        Command::Lab(args) => app::lab(args).await.map(|rows| {
            for row in rows {
                println!("{row}");
            }
        }),
        // Closing the terminal (SIGHUP) ends `dev` too, so its PostgreSQL goes with it.
        Command::Dev(args) => app::dev(args, shutdown_or_hangup()).await,
        Command::DeadLetters(args) => app::dead_letters(args).await,
        Command::Shadow(args) => app::shadow(args).await,
        Command::Relay(args) => app::relay(args, shutdown_signal()).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", without_repeats(&e));
            ExitCode::FAILURE
        }
    }
}

/// `0.3.0 (commit 1a2b3c4d5e6f, wasmtime 48.0.8, librdkafka 2.12.1)`.
fn version() -> &'static str {
    let librdkafka = inbox_host::kafka::librdkafka_version();
    let text = format!(
        "{} (commit {}, wasmtime {}, librdkafka {librdkafka})",
        env!("CARGO_PKG_VERSION"),
        env!("INBOX_HOST_COMMIT"),
        env!("INBOX_HOST_WASMTIME"),
    );
    Box::leak(text.into_boxed_str())
}

/// The error and its causes, leaving out a cause whose text the previous one
/// already quotes (database and I/O errors often repeat their source).
fn without_repeats(error: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in error.chain().map(ToString::to_string) {
        if !message.contains(&cause) {
            if !message.is_empty() {
                message.push_str(": ");
            }
            message.push_str(&cause);
        }
    }
    message
}

/// Resolves on SIGINT, SIGTERM or SIGHUP.
async fn shutdown_or_hangup() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = signal(SignalKind::hangup()).expect("installing the SIGHUP handler");
    tokio::select! {
        () = shutdown_signal() => {}
        _ = hangup.recv() => {}
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutdown requested: finishing the in-flight message");
}
