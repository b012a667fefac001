//! Pruning old inbox rows, and the check that the window outlives the topics'
//! retention (a pruned row makes a redelivered old message new again).

use std::time::Duration;

use sqlx::PgPool;

use crate::inbox;
use crate::kafka;

const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Warns when a topic keeps records longer than the inbox keeps rows.
pub async fn check_window(brokers: &str, topics: &[String], keep: Duration) {
    for topic in topics {
        match kafka::topic_retention(brokers, topic).await {
            Ok(Some(topic_keeps)) if topic_keeps <= keep => {
                tracing::info!(
                    topic,
                    topic_retention_h = topic_keeps.as_secs() / 3600,
                    "inbox retention outlives the topic's"
                );
            }
            Ok(kept) => tracing::warn!(
                topic,
                topic_retention = %kept.map_or("forever".into(), |d| format!("{} h", d.as_secs() / 3600)),
                inbox_retention_h = keep.as_secs() / 3600,
                "the topic keeps records longer than the inbox keeps rows: a message redelivered after its row \
                 is pruned would be handled again; raise --inbox-retention-days or lower the topic's retention.ms"
            ),
            Err(e) => tracing::warn!(
                topic,
                error = %e,
                "could not read the topic's retention.ms; make sure --inbox-retention-days outlives it"
            ),
        }
    }
}

/// Prunes now and then every hour, for as long as the task runs.
pub async fn prune_forever(pool: PgPool, group: String, keep: Duration) {
    let mut every = tokio::time::interval(PRUNE_EVERY);
    loop {
        every.tick().await;
        match inbox::prune(&pool, &group, keep).await {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(
                deleted,
                group,
                "pruned inbox rows past the retention window"
            ),
            Err(e) => tracing::warn!(error = %e, "pruning inbox rows failed; will try again"),
        }
    }
}
