//! The database side of the sandbox: the least-privileged role guests run under,
//! and a session reset before a pooled connection is reused.

use std::time::Duration;

use anyhow::{bail, Context};
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use sqlx::Executor;

/// The default role handler statements run under.
pub const DEFAULT_GUEST_ROLE: &str = "inbox_guest";

/// Undoes anything a session could carry from one message to the next. Guest SQL
/// is checked and every setting the host makes is transaction-local, so this is
/// the second line, not the first.
const RESET_SESSION: &str = "RESET SESSION AUTHORIZATION; RESET ROLE; RESET ALL; UNLISTEN *; \
     SELECT pg_advisory_unlock_all(); DISCARD TEMP; DISCARD SEQUENCES";

/// Pool settings for the inbox: every connection is reset when it is released.
pub fn pool_options(max_connections: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        // A broken connection shows on its first statement and the batch is
        // retried; a ping before every acquire costs a round trip per batch.
        .test_before_acquire(false)
        .after_release(|conn, _meta| {
            Box::pin(async move {
                // A connection that cannot be reset is closed rather than reused.
                Ok(conn.execute(RESET_SESSION).await.is_ok())
            })
        })
}

/// Makes sure `role` exists, cannot log in, and that the host's login may switch
/// to it; creates and grants it when the login is allowed to. The role gets no
/// rights here: grant it those on your plugin's own tables. Under the same
/// advisory lock as the migrations, so replicas started together take turns.
pub async fn ensure_guest_role(pool: &PgPool, role: &str) -> anyhow::Result<()> {
    let mut conn = pool.acquire().await?;
    super::schema::lock_setup(&mut conn).await?;
    let ensured = ensure_on(&mut conn, role).await;
    super::schema::unlock_setup(conn).await;
    ensured
}

async fn ensure_on(pool: &mut PgConnection, role: &str) -> anyhow::Result<()> {
    let (exists, member, superuser): (bool, bool, bool) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1),
                EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = $1 AND pg_has_role(current_user, r.oid, 'MEMBER')),
                (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)",
    )
    .bind(role)
    .fetch_one(&mut *pool)
    .await?;
    let instructions = format!(
        "as an administrator run: CREATE ROLE {role} NOLOGIN; GRANT {role} TO <the host's login>; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON <your plugin's tables> TO {role}"
    );
    if !exists {
        create(&mut *pool, "CREATE ROLE %I NOLOGIN", role)
            .await
            .with_context(|| {
                format!(
                    "the guest role {role} does not exist and cannot be created; {instructions}"
                )
            })?;
        tracing::info!(
            role,
            "created the guest role; grant it rights on your plugin's tables"
        );
    }
    if !member && !superuser {
        create(&mut *pool, "GRANT %I TO CURRENT_USER", role)
            .await
            .with_context(|| {
                format!("the host's login cannot switch to the guest role {role}; {instructions}")
            })?;
    }
    let guest_is_superuser: bool =
        sqlx::query_scalar("SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = $1")
            .bind(role)
            .fetch_one(&mut *pool)
            .await?;
    if guest_is_superuser {
        bail!("the guest role {role} is a superuser or bypasses row security: it must be an ordinary role");
    }
    if superuser {
        tracing::warn!("the host logs in as a superuser; in production give it an ordinary login that is a member of {role}");
    }
    Ok(())
}

/// Runs a role statement with the name quoted by PostgreSQL's own `format('%I')`.
async fn create(conn: &mut PgConnection, template: &str, role: &str) -> Result<(), sqlx::Error> {
    let statement: String = sqlx::query_scalar("SELECT format($1, $2)")
        .bind(template)
        .bind(role)
        .fetch_one(&mut *conn)
        .await?;
    sqlx::raw_sql(&statement).execute(&mut *conn).await?;
    Ok(())
}
