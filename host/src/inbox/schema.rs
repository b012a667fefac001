use sqlx::migrate::{MigrateError, Migrator};
use sqlx::{PgConnection, PgPool};

/// The host's migrations (`migrations/`).
pub(super) static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// Applies the host's migrations: the inbox, dead-letter and attempts tables in
/// the schema `inbox_host`, with sqlx's bookkeeping table beside them
/// (`inbox_host._sqlx_migrations`), never in `public`, where an application's
/// own sqlx migrations keep theirs.
pub async fn migrate(pool: &PgPool) -> Result<(), MigrateError> {
    let mut conn = pool.acquire().await?;
    // sqlx names its bookkeeping table without a schema: on this connection the
    // name resolves to the host's schema. Every statement of the migrations
    // names its schema itself.
    sqlx::raw_sql("CREATE SCHEMA IF NOT EXISTS inbox_host; SET search_path TO inbox_host")
        .execute(&mut *conn)
        .await?;
    let applied = async {
        adopt_bookkeeping_from_public(&mut conn).await?;
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
