//! What a least-privileged runtime login needs, checked at start when the host
//! does not migrate: the schema applied and each right, named with the `GRANT`
//! that fixes it (docs/deploy.md lists them).

use anyhow::bail;
use sqlx::PgPool;

use super::schema::MIGRATOR;

/// The rights the runner uses, per table (or `FUNCTION`) of the host's schema,
/// as a `GRANT … ON` names it (reading the migrations table lets it check the
/// schema's version).
pub const RUNTIME_RIGHTS: &[(&str, &str)] = &[
    ("inbox_host.inbox", "SELECT, INSERT"),
    ("inbox_host.inbox_before_0_4", "SELECT, DELETE"),
    (
        "FUNCTION inbox_host.inbox_prepare(text, timestamptz, timestamptz)",
        "EXECUTE",
    ),
    (
        "FUNCTION inbox_host.inbox_drop_before(text, timestamptz)",
        "EXECUTE",
    ),
    ("inbox_host.dead_letters", "SELECT, INSERT"),
    ("inbox_host.attempts", "SELECT, INSERT, UPDATE, DELETE"),
    ("inbox_host.outbox", "SELECT, INSERT, DELETE"),
    ("inbox_host.requests", "SELECT, INSERT, UPDATE, DELETE"),
    ("inbox_host._sqlx_migrations", "SELECT"),
];

/// Checks that the host's migrations were applied and the login holds every
/// right in [`RUNTIME_RIGHTS`]; the error names what is missing and the fix.
pub async fn check_rights(pool: &PgPool) -> anyhow::Result<()> {
    let not_migrated = || {
        anyhow::anyhow!(
            "the host's schema is not migrated and --no-migrate is set: run `inbox-host migrate` as an administrator first (docs/deploy.md)"
        )
    };
    let mut missing = Vec::new();
    let usage: Option<bool> = sqlx::query_scalar(
        "SELECT has_schema_privilege(oid, 'USAGE') FROM pg_namespace WHERE nspname = 'inbox_host'",
    )
    .fetch_optional(pool)
    .await?;
    match usage {
        None => return Err(not_migrated()),
        Some(false) => missing.push("GRANT USAGE ON SCHEMA inbox_host TO <login>".to_string()),
        Some(true) => {}
    }
    for (object, rights) in RUNTIME_RIGHTS {
        for right in rights.split(", ") {
            let held = holds(pool, object, right).await?;
            match held {
                None => return Err(not_migrated()),
                Some(false) => missing.push(format!("GRANT {right} ON {object} TO <login>")),
                Some(true) => {}
            }
        }
    }
    if !missing.is_empty() {
        bail!(
            "the host's login lacks rights it needs; as an administrator run: {}",
            missing.join("; ")
        );
    }
    let applied: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM inbox_host._sqlx_migrations WHERE success")
            .fetch_all(pool)
            .await?;
    let pending: Vec<i64> = MIGRATOR
        .iter()
        .map(|m| m.version)
        .filter(|v| !applied.contains(v))
        .collect();
    if !pending.is_empty() {
        return Err(not_migrated().context(format!("pending migrations: {pending:?}")));
    }
    Ok(())
}

/// Whether the login holds `right` on `object` (`None`: no such object). By
/// oid from the catalog: naming the object would need USAGE first.
async fn holds(pool: &PgPool, object: &str, right: &str) -> Result<Option<bool>, sqlx::Error> {
    match object.strip_prefix("FUNCTION inbox_host.") {
        Some(function) => {
            let name = function.split('(').next().unwrap_or(function);
            sqlx::query_scalar(
                "SELECT has_function_privilege(p.oid, $2) FROM pg_proc p
                 JOIN pg_namespace n ON n.oid = p.pronamespace
                 WHERE n.nspname = 'inbox_host' AND p.proname = $1",
            )
            .bind(name)
            .bind(right)
            .fetch_optional(pool)
            .await
        }
        None => {
            sqlx::query_scalar(
                "SELECT has_table_privilege(c.oid, $2) FROM pg_class c
                 JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = 'inbox_host' AND c.relname = $1",
            )
            .bind(object.trim_start_matches("inbox_host."))
            .bind(right)
            .fetch_optional(pool)
            .await
        }
    }
}
