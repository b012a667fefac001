//! Pruning old inbox rows, and the check that the window outlives the topics'
//! retention (a pruned row makes a redelivered old message new again).

use std::time::Duration;

use sqlx::PgPool;

use crate::inbox;
use crate::kafka;

const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Whether inbox rows kept for `keep` outlive a topic's records (`None`: the
/// topic keeps them forever). Only then is a redelivered message sure to meet
/// its row.
fn inbox_outlives(topic_keeps: Option<Duration>, keep: Duration) -> bool {
    topic_keeps.is_some_and(|topic_keeps| topic_keeps <= keep)
}

/// Warns when a topic keeps records longer than the inbox keeps rows.
pub async fn check_window(brokers: &str, topics: &[String], keep: Duration) {
    for topic in topics {
        match kafka::topic_retention(brokers, topic).await {
            Ok(Some(topic_keeps)) if inbox_outlives(Some(topic_keeps), keep) => {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inbox_must_keep_rows_at_least_as_long_as_the_topic_keeps_records() {
        let day = Duration::from_secs(86_400);
        for (topic_keeps, keep, outlives) in [
            (Some(day), 7 * day, true),
            (Some(7 * day), 7 * day, true),
            (Some(8 * day), 7 * day, false),
            (None, 365 * day, false),
        ] {
            assert_eq!(
                inbox_outlives(topic_keeps, keep),
                outlives,
                "{topic_keeps:?} vs {keep:?}"
            );
        }
    }
}
