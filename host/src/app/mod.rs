//! The composition root: the only module that knows Kafka, the inbox runner and
//! the plugin runtime together.

mod decide;
mod dev;
mod lab;
mod native_billing;
mod pipeline;
mod retention;
mod settings;
mod status;
mod worker;

use std::future::Future;

use anyhow::Context;
use sqlx::postgres::PgPool;

pub use decide::{decide, Backoff, RetryPolicy, Step};
pub use dev::dev;
pub use lab::{lab, LabRow};
pub use native_billing::NativeBilling;
pub use pipeline::{Delivery, HandlerSource, Pipeline, PipelineLimits, StopWhen, Verdict};
pub use settings::RunSettings;
pub use status::Metrics;

use crate::inbox::{self, Runner};
use crate::kafka::Consumer;
use crate::plugin::{Plugin, PluginCell, Runtime, Watcher};

/// Runs `inbox-host` with a plugin until `shutdown` resolves.
pub async fn run(settings: RunSettings, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let pool = connect(&settings.database_url, settings.db_pool_size).await?;
    inbox::migrate(&pool).await.context("applying migrations")?;
    if let Some(role) = &settings.runner.guest_role {
        inbox::ensure_guest_role(&pool, role).await?;
    }

    let runtime = Runtime::new(settings.sandbox.clone())?;
    let plugin = load_plugin(&runtime, &settings.plugin).await?;
    tracing::info!(
        plugin = %settings.plugin.display(),
        digest = plugin.digest(),
        group = %settings.runner.group,
        strategy = %settings.runner.strategy,
        worker_id = %settings.runner.worker_id,
        "plugin loaded; joining the consumer group"
    );
    let cell = PluginCell::new(plugin);
    let _reloads = spawn_hot_swap(&settings.plugin, &runtime, &cell)?;
    let metrics = std::sync::Arc::new(Metrics::default());
    if let Some(addr) = &settings.status_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on --status-addr {addr}"))?;
        tracing::info!(addr = %listener.local_addr()?, "serving /metrics and /health");
        tokio::spawn(status::serve(listener, metrics.clone(), cell.clone()));
    }

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
    let pipeline = Pipeline {
        consumer,
        runner: Runner::new(pool, settings.runner.clone()),
        source: cell,
        limits: settings.limits.clone(),
        observer: None,
        metrics: Some(metrics),
    };
    pipeline.run(shutdown, StopWhen::default()).await?;
    tracing::info!("stopped: batches in flight finished, stored offsets committed, group left");
    Ok(())
}

/// Watches the plugin file and SIGHUP; returns the handle that keeps it running.
fn spawn_hot_swap(
    path: &std::path::Path,
    runtime: &Runtime,
    cell: &PluginCell,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let (reload_tx, reload_rx) = tokio::sync::mpsc::channel(1);
    let mut hangups = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let _ = reload_tx.try_send(());
        }
    });
    let watcher = Watcher::new(path, runtime.clone(), cell.clone());
    Ok(tokio::spawn(watcher.run(reload_rx)))
}

/// Applies the host's migrations.
pub async fn migrate(database_url: &str) -> anyhow::Result<()> {
    let pool = connect(database_url, 2).await?;
    inbox::migrate(&pool).await.context("applying migrations")?;
    Ok(())
}

/// Validates a plugin offline; returns its digest.
pub async fn check(path: &std::path::Path) -> anyhow::Result<String> {
    let runtime = Runtime::new(Default::default())?;
    let plugin = load_plugin(&runtime, path).await?;
    Ok(plugin.digest().to_string())
}

/// Compiles a plugin off the async threads and instantiates it once in the sandbox.
pub async fn load_plugin(runtime: &Runtime, path: &std::path::Path) -> anyhow::Result<Plugin> {
    let (runtime, owned) = (runtime.clone(), path.to_path_buf());
    let plugin = tokio::task::spawn_blocking(move || Plugin::load(&runtime, &owned)).await??;
    plugin.check_instantiation().await?;
    Ok(plugin)
}

pub(crate) async fn connect(url: &str, connections: u32) -> anyhow::Result<PgPool> {
    inbox::pool_options(connections)
        .connect(url)
        .await
        .with_context(|| {
            format!(
                "cannot connect to PostgreSQL at {}: check --database-url / DATABASE_URL",
                redact(url)
            )
        })
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{}{user}{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_database_url_is_shown_without_its_password() {
        assert_eq!(
            super::redact("postgres://app:s3cret@db:5432/app"),
            "postgres://app@db:5432/app"
        );
        assert_eq!(super::redact("postgres://db/app"), "postgres://db/app");
    }
}
