use sqlx::PgPool;

/// Applies the host's migrations (`migrations/`): the inbox and dead-letter tables.
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    sqlx::migrate!("../migrations").run(pool).await
}

/// Creates the tables of the example and test plugins (`migrations/examples/`).
/// Used by the lab, the demo and the tests, never by `inbox-host migrate`.
pub async fn apply_example_tables(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(include_str!("../../../migrations/examples/tables.sql"))
        .execute(pool)
        .await?;
    Ok(())
}
