//! `inbox-host relay`: the outbox relay alone, for applications that write
//! outbox rows themselves (the producer half of the pattern, no consumer).

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::Context;

use crate::app::relay::{self, RelayStatus};
use crate::cli::RelayArgs;
use crate::kafka::Publisher;

/// How often the relay command logs what it sent.
const REPORT_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// Relays committed outbox rows until `shutdown` resolves.
pub async fn relay(args: RelayArgs, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let url = args.database.required()?;
    let extra = crate::app::settings::kafka_options(&args.kafka_opts)
        .map_err(|bad| anyhow::anyhow!("{}", bad.join("\n  ")))?;
    let publisher = Publisher::for_relay(&args.brokers, &extra)
        .context("the relay's producer (--brokers, --kafka-opt)")?;
    let pool = crate::app::database::connect(url, 2).await?;
    let migrated: bool = sqlx::query_scalar("SELECT to_regclass('inbox_host.outbox') IS NOT NULL")
        .fetch_one(&pool)
        .await?;
    if !migrated {
        anyhow::bail!(
            "there is no inbox_host.outbox table in this database: run `inbox-host migrate` first (docs/outbox.md)"
        );
    }
    let status = Arc::new(RelayStatus::default());
    tokio::spawn(relay::measure_backlog_forever(
        pool.clone(),
        status.clone(),
        i64::MAX,
    ));
    let report = {
        let status = status.clone();
        async move {
            loop {
                tokio::time::sleep(REPORT_EVERY).await;
                tracing::info!(
                    relayed = status.sent.load(Ordering::Relaxed),
                    backlog = status.backlog_rows.load(Ordering::Relaxed),
                    errors = status.errors.load(Ordering::Relaxed),
                    "relay progress"
                );
            }
        }
    };
    tracing::info!(brokers = %args.brokers, "relay started");
    tokio::select! {
        () = relay::relay_forever(pool, publisher, status.clone()) => {}
        () = report => {}
        () = shutdown => {}
    }
    tracing::info!(
        relayed = status.sent.load(Ordering::Relaxed),
        "relay stopped; rows not yet acknowledged stay in the outbox"
    );
    Ok(())
}
