//! The composition root: the only module that knows Kafka, the inbox runner and
//! the plugin runtime together.

mod database;
mod dead_letter_topic;
mod dead_letters;
mod decide;
mod dev;
mod failpoint;
mod lab;
mod metrics;
mod native_billing;
mod pending;
mod pipeline;
mod progress;
mod retention;
mod settings;
mod shadow;
mod status;
mod traces;
mod worker;

use std::future::Future;

use anyhow::Context;

pub(crate) use database::{connect, connect_in};
pub use dead_letters::dead_letters;
pub use decide::{decide, Backoff, RetryPolicy, Step};
pub use dev::dev;
pub use lab::{lab, LabRow};
pub use metrics::Metrics;
pub use native_billing::NativeBilling;
pub use pipeline::{Delivery, HandlerSource, Pipeline, PipelineLimits, StopWhen, Verdict};
pub use settings::RunSettings;
pub use shadow::shadow;
pub use traces::Traces;

use crate::inbox::{self, Runner};
use crate::kafka::Consumer;
use crate::plugin::{Plugin, PluginCell, Runtime, Watcher};
use dead_letter_topic::DeadLetterTopic;

/// Runs `inbox-host` with a plugin until `shutdown` resolves.
///
/// Every local check comes first (the plugin compiled and instantiated, the
/// status address bound, the Kafka configuration built), all problems reported
/// together; then the database, which the host waits for while it is down.
pub async fn run(settings: RunSettings, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    tokio::pin!(shutdown);
    // Installed first: a SIGHUP while starting asks for a reload once running
    // (the plugin is read when it starts anyway), never ends the process.
    let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("installing the SIGHUP handler")?;
    let Preflight {
        runtime,
        plugin,
        status,
        traces,
        dead_letter_topic,
    } = preflight(&settings).await?;
    let cell = PluginCell::new(plugin);
    let metrics = std::sync::Arc::new(Metrics::default());
    metrics.watch_plugin(cell.clone());
    if let Some(listener) = status {
        tracing::info!(addr = %listener.local_addr()?, "serving /metrics, /health/live and /health/ready");
        tokio::spawn(status::serve(
            listener,
            metrics.clone(),
            cell.clone(),
            settings.stall_after,
        ));
    }
    metrics.database_reachable(false);
    let pool = tokio::select! {
        pool = database::ready(&settings) => pool?,
        () = &mut shutdown => {
            tracing::info!("stopped before the database was reachable");
            return Ok(());
        }
    };
    metrics.database_reachable(true);
    metrics.watch_pool(pool.clone());
    tracing::info!(
        plugin = %settings.plugin.display(),
        digest = cell.current().digest(),
        group = %settings.runner.group,
        strategy = %settings.runner.strategy,
        worker_id = %settings.runner.worker_id,
        "plugin loaded; joining the consumer group"
    );
    let _reloads = spawn_hot_swap(&settings.plugin, &runtime, &cell, hangups);

    let _pruning = match settings.inbox_retention {
        Some(keep) => {
            let (brokers, topics) = (
                settings.consumer.brokers.clone(),
                settings.consumer.topics.clone(),
            );
            tokio::spawn(async move { retention::check_window(&brokers, &topics, keep).await });
            Some(tokio::spawn(retention::prune_forever(
                pool.clone(),
                settings.runner.group.clone(),
                keep,
            )))
        }
        None => None,
    };
    let consumer = Consumer::join(&settings.consumer).with_context(|| {
        format!(
            "joining group {} at {}",
            settings.consumer.group, settings.consumer.brokers
        )
    })?;
    metrics.watch_kafka(consumer.group_health());
    let _progress = tokio::spawn(log_progress(metrics.clone()));
    let pipeline = Pipeline {
        consumer,
        runner: Runner::new(pool, settings.runner.clone()),
        source: cell,
        limits: settings.limits.clone(),
        observer: None,
        metrics: Some(metrics),
        traces: traces.clone(),
        dead_letter_topic,
    };
    let ran = pipeline.run(shutdown, StopWhen::default()).await;
    if let Some(traces) = traces {
        tokio::task::spawn_blocking(move || traces.shutdown()).await?;
    }
    ran?;
    tracing::info!("stopped: batches in flight finished, stored offsets committed, group left");
    Ok(())
}

/// How often the progress line is logged.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// One info line every 30 s saying how the host is doing, instead of a line per
/// message (those are at debug).
async fn log_progress(metrics: std::sync::Arc<Metrics>) {
    let mut ticks = tokio::time::interval(PROGRESS_EVERY);
    ticks.tick().await;
    let mut last = metrics.totals();
    loop {
        ticks.tick().await;
        let now = metrics.totals();
        let processed = now.processed - last.processed;
        tracing::info!(
            processed,
            per_second = processed as f64 / PROGRESS_EVERY.as_secs_f64(),
            duplicates = now.duplicates - last.duplicates,
            failures = now.failures - last.failures,
            set_aside = now.set_aside - last.set_aside,
            lag = now.lag,
            partitions = now.partitions,
            "progress over the last 30 s"
        );
        last = now;
    }
}

/// What the local checks produced.
struct Preflight {
    runtime: Runtime,
    plugin: Plugin,
    status: Option<tokio::net::TcpListener>,
    traces: Option<std::sync::Arc<Traces>>,
    dead_letter_topic: Option<DeadLetterTopic>,
}

/// The checks that need no connection, all of them, with every problem in one
/// error.
async fn preflight(settings: &RunSettings) -> anyhow::Result<Preflight> {
    let mut problems = Vec::new();
    let runtime =
        Runtime::with_compile_cache(settings.sandbox.clone(), settings.compile_cache.as_deref())?;
    let plugin = load_plugin(&runtime, &settings.plugin)
        .await
        .map_err(|e| problems.push(format!("{e:#}")))
        .ok();
    let status = match &settings.status_addr {
        Some(addr) => tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| problems.push(format!("cannot listen on --status-addr {addr}: {e}")))
            .ok(),
        None => None,
    };
    if let Err(e) = crate::kafka::check_config(&settings.consumer) {
        problems.push(format!(
            "the Kafka configuration (--kafka-opt) is invalid: {e}"
        ));
    }
    let traces = Traces::from_env(&settings.runner.group)
        .map_err(|e| problems.push(format!("{e:#}")))
        .ok()
        .flatten()
        .map(std::sync::Arc::new);
    let dead_letter_topic = settings.dead_letter_topic.as_ref().and_then(|topic| {
        crate::kafka::Publisher::new(&settings.consumer.brokers, &settings.consumer.extra)
            .map(|publisher| DeadLetterTopic::new(topic.clone(), publisher))
            .map_err(|e| problems.push(format!("the dead-letter producer: {e}")))
            .ok()
    });
    match plugin {
        Some(plugin) if problems.is_empty() => Ok(Preflight {
            runtime,
            plugin,
            status,
            traces,
            dead_letter_topic,
        }),
        _ => anyhow::bail!("{}", problems.join("\n  ")),
    }
}

/// Watches the plugin file and SIGHUP; returns the handle that keeps it running.
fn spawn_hot_swap(
    path: &std::path::Path,
    runtime: &Runtime,
    cell: &PluginCell,
    mut hangups: tokio::signal::unix::Signal,
) -> tokio::task::JoinHandle<()> {
    let (reload_tx, reload_rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let _ = reload_tx.try_send(());
        }
    });
    let watcher = Watcher::new(path, runtime.clone(), cell.clone());
    tokio::spawn(watcher.run(reload_rx))
}

/// Applies the host's migrations.
pub async fn migrate(database_url: &str) -> anyhow::Result<()> {
    let pool = connect(database_url, 2).await?;
    inbox::migrate(&pool).await.context("applying migrations")?;
    Ok(())
}

/// Validates a plugin offline (leaving it compiled in `compile_cache`);
/// returns its digest.
pub async fn check(
    path: &std::path::Path,
    compile_cache: Option<&std::path::Path>,
) -> anyhow::Result<String> {
    let runtime = Runtime::with_compile_cache(Default::default(), compile_cache)?;
    let plugin = load_plugin(&runtime, path).await?;
    Ok(plugin.digest().to_string())
}

/// `inbox-host build`: builds the plugin folder with its language's toolchain,
/// then checks the component (leaving it compiled in the cache); returns the
/// component's path and digest.
pub async fn build(args: &crate::cli::BuildArgs) -> anyhow::Result<(std::path::PathBuf, String)> {
    let output = crate::toolchain::output_path(&args.source, args.output.as_deref())?;
    let (dir, built, toolchains) = (args.source.clone(), output.clone(), args.toolchains()?);
    tokio::task::spawn_blocking(move || crate::toolchain::build(&dir, &built, &toolchains))
        .await??;
    let digest = check(&output, args.compile_cache.dir().as_deref())
        .await
        .with_context(|| {
            format!(
                "the built component {} does not pass the check",
                output.display()
            )
        })?;
    Ok((output, digest))
}

/// Compiles a plugin off the async threads and instantiates it once in the sandbox.
pub async fn load_plugin(runtime: &Runtime, path: &std::path::Path) -> anyhow::Result<Plugin> {
    let (runtime, owned) = (runtime.clone(), path.to_path_buf());
    let plugin = tokio::task::spawn_blocking(move || Plugin::load(&runtime, &owned)).await??;
    plugin.check_instantiation().await?;
    Ok(plugin)
}
