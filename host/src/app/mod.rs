//! The composition root: the only module that knows Kafka, the inbox runner and
//! the plugin runtime together. Four rooms: the wiring here (`run`, `settings`,
//! `database`, `retention`), the consume path (`consume`), observability
//! (`observe`) and operator commands (`commands`); `delivery` is the leaf they
//! share (what happened to a record).

pub mod commands;
pub mod consume;
mod database;
pub mod delivery;
pub mod observe;
pub mod relay;
pub mod requests;
mod retention;
mod settings;

use std::future::Future;

use anyhow::Context;

pub use commands::{build, check, dead_letters, dev, lab, migrate, relay, shadow, LabRow};
pub use consume::{
    decide, lane_of, Backoff, HandlerSource, Pipeline, PipelineLimits, RetryPolicy, Step, StopWhen,
};
pub use delivery::Delivery;
pub use observe::{Metrics, Traces};
pub use settings::RunSettings;

use crate::inbox::Runner;
use crate::kafka::Consumer;
use crate::plugin::{Plugin, PluginCell, Runtime, Watcher};
use consume::DeadLetterTopic;

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
        relay_publisher,
    } = preflight(&settings).await?;
    let cell = PluginCell::new(plugin);
    let metrics = std::sync::Arc::new(Metrics::default());
    metrics.watch_plugin(cell.clone());
    if let Some(listener) = status {
        tracing::info!(addr = %listener.local_addr()?, "serving /metrics, /health/live and /health/ready");
        tokio::spawn(observe::serve(
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

    if let Some(keep) = settings.inbox_retention {
        let consumer = settings.consumer.clone();
        tokio::spawn(async move {
            retention::check_window(&consumer.brokers, &consumer.extra, &consumer.topics, keep)
                .await
        });
    }
    let keep = retention::Keep {
        inbox: settings.inbox_retention,
        dead_letters: settings.dead_letter_retention,
    };
    // The first round before joining, so the first claims find their partitions.
    retention::upkeep(&pool, &settings.runner.group, keep).await;
    let _upkeep = tokio::spawn(retention::upkeep_forever(
        pool.clone(),
        settings.runner.group.clone(),
        keep,
    ));
    let publishes = !settings.sandbox.publish.topics.is_empty();
    let outbox = std::sync::Arc::new(relay::RelayStatus::for_host(publishes));
    metrics.watch_relay(outbox.clone());
    metrics.watch_gate(settings.http.gate.clone());
    let _backlog = tokio::spawn(relay::measure_backlog_forever(
        pool.clone(),
        outbox.clone(),
        settings.limits.max_outbox_backlog,
    ));
    let _wake_elsewhere = publishes.then(|| {
        tokio::spawn(relay::notify_elsewhere_forever(
            pool.clone(),
            outbox.clone(),
        ))
    });
    let _relay = relay_publisher.map(|publisher| {
        tokio::spawn(relay::relay_forever(
            pool.clone(),
            publisher,
            outbox.clone(),
        ))
    });
    let requests_committed = std::sync::Arc::new(tokio::sync::Notify::new());
    let _requests = tokio::spawn(requests::send_forever(
        pool.clone(),
        settings.http.gate.clone(),
        requests_committed.clone(),
        requests::SenderSettings {
            group: settings.runner.group.clone(),
            worker_id: settings.runner.worker_id.clone(),
            schedule: settings.http.schedule,
            per_origin: settings.http.per_origin,
            lease: settings.http.gate.timeout() + std::time::Duration::from_secs(5),
        },
    ));
    check_credentials(&settings).await?;
    let consumer = Consumer::join(&settings.consumer).with_context(|| {
        format!(
            "joining group {} at {}",
            settings.consumer.group, settings.consumer.brokers
        )
    })?;
    metrics.watch_kafka(consumer.group_health());
    let _progress = tokio::spawn(observe::log_progress(metrics.clone()));
    let pipeline = Pipeline {
        consumer,
        runner: Runner::new(pool, settings.runner.clone()),
        source: cell,
        limits: settings.limits.clone(),
        observer: None,
        metrics: Some(metrics),
        traces: traces.clone(),
        dead_letter_topic,
        outbox: Some(outbox),
        // Only a host whose guests may send requests has any to wake for.
        requests: (!settings.http.gate.allow().is_empty()).then_some(requests_committed),
    };
    let ran = pipeline.run(shutdown, StopWhen::default()).await;
    if let Some(traces) = traces {
        tokio::task::spawn_blocking(move || traces.shutdown()).await?;
    }
    ran?;
    tracing::info!("stopped: batches in flight finished");
    Ok(())
}

/// With SASL, fails within `--connect-timeout` when the brokers refuse the
/// credentials: a wrong password does not mend itself, and waiting would only
/// hide it. Brokers that cannot be reached are waited for, as always.
async fn check_credentials(settings: &RunSettings) -> anyhow::Result<()> {
    let extra = &settings.consumer.extra;
    if !crate::kafka::uses_sasl(extra) {
        return Ok(());
    }
    let (brokers, owned, timeout) = (
        settings.consumer.brokers.clone(),
        extra.clone(),
        settings.connect_timeout,
    );
    let refused = tokio::task::spawn_blocking(move || {
        crate::kafka::refused_credentials(&brokers, &owned, timeout)
    })
    .await??;
    match refused {
        None => Ok(()),
        Some(reason) => {
            // librdkafka takes the mechanism under either name.
            let option = |keys: &[&str]| {
                extra
                    .iter()
                    .find(|(k, _)| keys.contains(&k.as_str()))
                    .map_or("(not set)", |(_, v)| v.as_str())
            };
            anyhow::bail!(
                "the brokers at {} refused this host's SASL credentials (sasl.mechanism={}, \
                 sasl.username={}): {reason}; check the user and password given with \
                 --kafka-opt sasl.username=... and --kafka-opt sasl.password=...",
                settings.consumer.brokers,
                option(&["sasl.mechanism", "sasl.mechanisms"]),
                option(&["sasl.username"]),
            )
        }
    }
}

/// What the local checks produced.
struct Preflight {
    runtime: Runtime,
    plugin: Plugin,
    status: Option<tokio::net::TcpListener>,
    traces: Option<std::sync::Arc<Traces>>,
    dead_letter_topic: Option<DeadLetterTopic>,
    /// The outbox relay's producer, unless `--no-relay`.
    relay_publisher: Option<crate::kafka::Publisher>,
}

/// The checks that need no connection, all of them, with every problem in one
/// error.
async fn preflight(settings: &RunSettings) -> anyhow::Result<Preflight> {
    let mut problems = Vec::new();
    let runtime =
        Runtime::with_compile_cache(settings.sandbox.clone(), settings.compile_cache.as_deref())?;
    let plugin = Plugin::load_checked(&runtime, &settings.plugin)
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
    let relay_publisher = settings.relay.then(|| {
        crate::kafka::Publisher::for_relay(&settings.consumer.brokers, &settings.consumer.extra)
            .map_err(|e| problems.push(format!("the outbox relay's producer: {e}")))
            .ok()
    });
    match plugin {
        Some(plugin) if problems.is_empty() => Ok(Preflight {
            runtime,
            plugin,
            status,
            traces,
            dead_letter_topic,
            relay_publisher: relay_publisher.flatten(),
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
