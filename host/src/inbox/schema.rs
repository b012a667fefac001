use sqlx::migrate::{MigrateError, Migrator};
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres};

/// The host's migrations (`migrations/`).
pub(super) static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// Applies the host's migrations: the inbox, dead-letter and attempts tables in
/// the schema `inbox_host`, with sqlx's bookkeeping table beside them
/// (`inbox_host._sqlx_migrations`), never in `public`, where an application's
/// own sqlx migrations keep theirs.
///
/// Replicas started together all migrate: a session advisory lock makes them
/// take turns (the first applies, the others find the work done), so none
/// fails on `CREATE SCHEMA` racing another's.
pub async fn migrate(pool: &PgPool) -> Result<(), MigrateError> {
    let mut conn = pool.acquire().await?;
    lock_setup(&mut conn).await?;
    let applied = migrate_locked(&mut conn).await;
    unlock_setup(conn).await;
    applied
}

/// The advisory lock key the host's set-up (migrations, the guest role) runs
/// under ("inbox_ho" in ASCII).
const SETUP_LOCK: i64 = 0x696e_626f_785f_686f;

/// Waits for, then holds, the set-up lock on this connection.
pub(super) async fn lock_setup(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(SETUP_LOCK)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Releases the set-up lock; a connection that cannot is closed, never pooled
/// with the lock held.
pub(super) async fn unlock_setup(mut conn: PoolConnection<Postgres>) {
    let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(SETUP_LOCK)
        .execute(&mut *conn)
        .await;
    if unlocked.is_err() {
        drop(conn.detach());
    }
}

async fn migrate_locked(conn: &mut PgConnection) -> Result<(), MigrateError> {
    // sqlx names its bookkeeping table without a schema: on this connection the
    // name resolves to the host's schema. Every statement of the migrations
    // names its schema itself.
    sqlx::raw_sql("CREATE SCHEMA IF NOT EXISTS inbox_host; SET search_path TO inbox_host")
        .execute(&mut *conn)
        .await?;
    let applied = async {
        adopt_bookkeeping_from_public(conn).await?;
        MIGRATOR.run(&mut *conn).await
    }
    .await;
    sqlx::raw_sql("RESET search_path")
        .execute(&mut *conn)
        .await?;
    applied
}

/// Hosts before 0.2 kept their rows in `public._sqlx_migrations`, next to an
/// application's: move ours (same version and checksum) into the host's schema
/// once, so neither side finds the other's migrations "applied but missing".
async fn adopt_bookkeeping_from_public(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    let (ours_missing, public_exists): (bool, bool) = sqlx::query_as(
        "SELECT to_regclass('inbox_host._sqlx_migrations') IS NULL,
                to_regclass('public._sqlx_migrations') IS NOT NULL",
    )
    .fetch_one(&mut *conn)
    .await?;
    if !(ours_missing && public_exists) {
        return Ok(());
    }
    let versions: Vec<i64> = MIGRATOR.iter().map(|m| m.version).collect();
    let checksums: Vec<Vec<u8>> = MIGRATOR.iter().map(|m| m.checksum.to_vec()).collect();
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    let ours: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM public._sqlx_migrations m
         JOIN unnest($1::bigint[], $2::bytea[]) AS o(version, checksum) USING (version, checksum)",
    )
    .bind(&versions)
    .bind(&checksums)
    .fetch_one(&mut *tx)
    .await?;
    if ours == 0 {
        return Ok(());
    }
    sqlx::raw_sql(
        "CREATE TABLE inbox_host._sqlx_migrations (LIKE public._sqlx_migrations INCLUDING ALL)",
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "WITH moved AS (
             DELETE FROM public._sqlx_migrations m
             USING unnest($1::bigint[], $2::bytea[]) AS o(version, checksum)
             WHERE m.version = o.version AND m.checksum = o.checksum
             RETURNING m.*)
         INSERT INTO inbox_host._sqlx_migrations SELECT * FROM moved",
    )
    .bind(&versions)
    .bind(&checksums)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    tracing::info!(
        moved = ours,
        "moved the host's migration records from public._sqlx_migrations to inbox_host._sqlx_migrations"
    );
    Ok(())
}

/// Creates the tables of the example and test plugins (`migrations/examples/`).
/// Used by the lab, the demo and the tests, never by `inbox-host migrate`.
pub async fn apply_example_tables(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(include_str!("../../../migrations/examples/tables.sql"))
        .execute(pool)
        .await?;
    Ok(())
}
