//! The inbox's upkeep (partitions prepared ahead, what is past its window
//! removed), and the check that the window outlives the topics' retention (a
//! removed row makes a redelivered old message new again).

use std::time::Duration;

use sqlx::PgPool;

use crate::inbox;
use crate::kafka;

const UPKEEP_EVERY: Duration = Duration::from_secs(600);

/// Whether inbox rows kept for `keep` outlive a topic's records (`None`: the
/// topic keeps them forever). Only then is a redelivered message sure to meet
/// its row.
fn inbox_outlives(topic_keeps: Option<Duration>, keep: Duration) -> bool {
    topic_keeps.is_some_and(|topic_keeps| topic_keeps <= keep)
}

/// Warns when a topic keeps records longer than the inbox keeps rows.
pub async fn check_window(
    brokers: &str,
    extra: &[(String, String)],
    topics: &[String],
    keep: Duration,
) {
    for topic in topics {
        match kafka::topic_retention(brokers, extra, topic).await {
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

/// What the host keeps, and for how long (`None`: forever).
#[derive(Debug, Clone, Copy)]
pub struct Keep {
    pub inbox: Option<Duration>,
    pub dead_letters: Option<Duration>,
}

/// Runs [`upkeep`] every ten minutes (the host runs the first round itself
/// before it joins), for as long as the task runs.
pub async fn upkeep_forever(pool: PgPool, group: String, keep: Keep) {
    let first = tokio::time::Instant::now() + UPKEEP_EVERY;
    let mut every = tokio::time::interval_at(first, UPKEEP_EVERY);
    loop {
        every.tick().await;
        upkeep(&pool, &group, keep).await;
    }
}

/// One round of [`upkeep_forever`]; what fails is logged and tried next round.
pub async fn upkeep(pool: &PgPool, group: &str, keep: Keep) {
    let behind = keep
        .inbox
        .map_or(inbox::PREPARED_BEHIND, |k| k.min(inbox::PREPARED_BEHIND));
    match inbox::prepare_partitions(pool, group, behind).await {
        Ok(0) => {}
        Ok(made) => tracing::info!(made, group, "prepared inbox partitions"),
        Err(e) => {
            tracing::warn!(error = %e, group, "preparing inbox partitions failed; will try again")
        }
    }
    if let Some(keep) = keep.inbox {
        match inbox::prune(pool, group, keep).await {
            Ok(pruned) if pruned == inbox::Pruned::default() => {}
            Ok(pruned) => tracing::info!(
                partitions = pruned.partitions,
                rows_before_0_4 = pruned.rows_before_0_4,
                group,
                "dropped inbox partitions past the retention window"
            ),
            Err(e) => tracing::warn!(error = %e, "pruning the inbox failed; will try again"),
        }
    }
    if let Some(keep) = keep.dead_letters {
        match inbox::prune_dead_letters(pool, group, keep).await {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(
                deleted,
                group,
                "deleted dead letters past --dead-letter-retention-days"
            ),
            Err(e) => tracing::warn!(error = %e, "pruning dead letters failed; will try again"),
        }
    }
    if let Err(e) = inbox::prune_attempts(pool, group).await {
        tracing::warn!(error = %e, "pruning old attempts rows failed; will try again");
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
