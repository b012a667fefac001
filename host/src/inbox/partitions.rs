//! The inbox's partitions: one table per group, one per hour of the records'
//! own timestamps below it (docs/semantics.md, "The inbox over time"). The
//! migration's functions do the DDL, so a runtime login needs only `EXECUTE`.

use std::time::Duration;

use sqlx::PgPool;

use super::store::sqlstate;

/// How far ahead of now the hours are prepared: a day of producers' clock
/// skew, and of hosts that cannot reach the database, before records of an
/// unprepared hour go to the group's `_other` partition.
pub const PREPARED_AHEAD: Duration = Duration::from_secs(24 * 3600);

/// How far back hours are prepared when the window does not say (records of
/// a lagging group land in their own hours up to this far behind).
pub const PREPARED_BEHIND: Duration = Duration::from_secs(2 * 24 * 3600);

/// Makes sure `group` has its partitions for the hours from `behind` ago to
/// [`PREPARED_AHEAD`] from now; returns how many were created. Hosts of one
/// group take turns (a lock per group in the function).
pub async fn prepare(pool: &PgPool, group: &str, behind: Duration) -> Result<i32, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT inbox_host.inbox_prepare($1, now() - make_interval(secs => $2),
                                            now() + make_interval(secs => $3))",
    )
    .bind(group)
    .bind(behind.as_secs_f64())
    .bind(PREPARED_AHEAD.as_secs_f64())
    .fetch_one(pool)
    .await
}

/// Drops `group`'s hourly partitions that ended more than `keep` ago (and
/// deletes the rows of its `_other` partition claimed that long ago); returns
/// how many partitions were dropped. Two calls of `inbox_drop_before`, each its
/// own transaction: the first empties what holds rows (locking only those
/// partitions), the second drops them empty (the group's table locked for a
/// catalog change only); each waits at most 500 ms for its locks and is tried
/// again after a second, three times.
pub async fn drop_older(pool: &PgPool, group: &str, keep: Duration) -> Result<i32, sqlx::Error> {
    let before: f64 =
        sqlx::query_scalar("SELECT extract(epoch FROM now() - make_interval(secs => $1))::float8")
            .bind(keep.as_secs_f64())
            .fetch_one(pool)
            .await?;
    let mut dropped = 0;
    for _step in 0..2 {
        dropped += drop_before(pool, group, before).await?;
    }
    Ok(dropped)
}

/// One call of `inbox_drop_before` (`before`: seconds since the epoch),
/// tried again after a lock timeout.
async fn drop_before(pool: &PgPool, group: &str, before: f64) -> Result<i32, sqlx::Error> {
    let mut tries = 0;
    loop {
        let called =
            sqlx::query_scalar("SELECT inbox_host.inbox_drop_before($1, to_timestamp($2))")
                .bind(group)
                .bind(before)
                .fetch_one(pool)
                .await;
        match called {
            Err(e) if sqlstate(&e).as_deref() == Some("55P03") && tries < 3 => {
                tries += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            result => return result,
        }
    }
}

/// PostgreSQL's "no partition of relation … found for row": the group has no
/// partition yet (nothing prepared it).
pub(super) fn is_missing(error: &sqlx::Error) -> bool {
    sqlstate(error).as_deref() == Some("23514")
        && error
            .as_database_error()
            .is_some_and(|e| e.message().starts_with("no partition of relation"))
}
