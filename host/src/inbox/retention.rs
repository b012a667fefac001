//! Retention: what the host removes as it ages. Inbox rows go a whole hourly
//! partition at a time; the pre-0.4 table, dead letters and attempts by
//! batched `DELETE`.

use std::time::Duration;

use sqlx::PgPool;

use super::partitions;

/// Rows deleted per statement, so pruning never holds many locks for long.
const BATCH: i64 = 5_000;

/// An attempts row whose record nobody tried for this long is left by a crash
/// or a moved partition: the record is retried with a fresh count.
pub const ATTEMPTS_KEPT: Duration = Duration::from_secs(7 * 24 * 3600);

/// What one round of pruning removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    pub partitions: i32,
    pub rows_before_0_4: u64,
}

/// Removes the group's inbox rows older than `keep`: its hourly partitions
/// that ended that long ago, and rows of the pre-0.4 table received before
/// then. A removed row makes its message new again, so `keep` must outlive
/// the topics' retention.
pub async fn prune(pool: &PgPool, group: &str, keep: Duration) -> Result<Pruned, sqlx::Error> {
    let partitions = partitions::drop_older(pool, group, keep).await?;
    let rows_before_0_4 = delete_in_batches(
        pool,
        "DELETE FROM inbox_host.inbox_before_0_4
         WHERE ctid IN (SELECT ctid FROM inbox_host.inbox_before_0_4
                        WHERE consumer_group = $1 AND received_at < now() - make_interval(secs => $2)
                        LIMIT $3)",
        group,
        keep,
    )
    .await?;
    Ok(Pruned {
        partitions,
        rows_before_0_4,
    })
}

/// Deletes the group's dead letters recorded more than `keep` ago; returns how many.
pub async fn prune_dead_letters(
    pool: &PgPool,
    group: &str,
    keep: Duration,
) -> Result<u64, sqlx::Error> {
    delete_in_batches(
        pool,
        "DELETE FROM inbox_host.dead_letters
         WHERE id IN (SELECT id FROM inbox_host.dead_letters
                      WHERE consumer_group = $1 AND recorded_at < now() - make_interval(secs => $2)
                      LIMIT $3)",
        group,
        keep,
    )
    .await
}

/// Deletes the group's attempts rows last failed more than [`ATTEMPTS_KEPT`]
/// ago (a worker removes a record's row once it is done or set aside; these
/// are what crashes left).
pub async fn prune_attempts(pool: &PgPool, group: &str) -> Result<u64, sqlx::Error> {
    delete_in_batches(
        pool,
        "DELETE FROM inbox_host.attempts
         WHERE ctid IN (SELECT ctid FROM inbox_host.attempts
                        WHERE consumer_group = $1 AND last_failed_at < now() - make_interval(secs => $2)
                        LIMIT $3)",
        group,
        ATTEMPTS_KEPT,
    )
    .await
}

/// Runs `delete` (binding group, age in seconds and [`BATCH`]) until it
/// deletes less than a batch; returns the rows deleted.
async fn delete_in_batches(
    pool: &PgPool,
    delete: &str,
    group: &str,
    older_than: Duration,
) -> Result<u64, sqlx::Error> {
    let mut deleted = 0;
    loop {
        let done = sqlx::query(delete)
            .bind(group)
            .bind(older_than.as_secs_f64())
            .bind(BATCH)
            .execute(pool)
            .await?
            .rows_affected();
        deleted += done;
        if done < BATCH as u64 {
            return Ok(deleted);
        }
    }
}
