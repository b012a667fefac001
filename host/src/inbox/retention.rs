use std::time::Duration;

use sqlx::PgPool;

/// Rows deleted per statement, so pruning never holds many locks for long.
const BATCH: i64 = 5_000;

/// Deletes the group's inbox rows received more than `keep` ago; returns how
/// many. A deleted row makes its message new again, so `keep` must outlive the
/// topic's retention. Attempts rows whose last failure is that old go too (a
/// worker removes a record's row once it is done; these are left by crashes).
pub async fn prune(pool: &PgPool, group: &str, keep: Duration) -> Result<u64, sqlx::Error> {
    let mut deleted = 0;
    loop {
        let done = sqlx::query(
            "DELETE FROM inbox_host.inbox
             WHERE ctid IN (SELECT ctid FROM inbox_host.inbox
                            WHERE consumer_group = $1 AND received_at < now() - make_interval(secs => $2)
                            LIMIT $3)",
        )
        .bind(group)
        .bind(keep.as_secs_f64())
        .bind(BATCH)
        .execute(pool)
        .await?
        .rows_affected();
        deleted += done;
        if done < BATCH as u64 {
            break;
        }
    }
    sqlx::query(
        "DELETE FROM inbox_host.attempts
         WHERE consumer_group = $1 AND last_failed_at < now() - make_interval(secs => $2)",
    )
    .bind(group)
    .bind(keep.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(deleted)
}
