//! Reaching PostgreSQL at start: a first connection that names its cause, the
//! migrations (or a check of them and of the login's rights), the guest role;
//! while the database is unreachable the host keeps trying and says so.

use std::time::Duration;

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::{ConnectOptions, Connection};
use tokio::time::Instant;

use super::RunSettings;
use crate::inbox;

/// Longest wait between two attempts while the database is unreachable.
const RETRY_MAX: Duration = Duration::from_secs(30);
/// How often "still unreachable" is repeated.
const STILL_DOWN_EVERY: Duration = Duration::from_secs(60);

/// Why an attempt to get the database ready failed.
enum Failure {
    /// The database is down or unreachable: try again.
    Transient(anyhow::Error),
    /// Trying again cannot help (wrong password, no such database, a bad URL,
    /// missing rights, a failed migration): stop with the message.
    Fatal(anyhow::Error),
}

/// A pool to the migrated (or checked) database. Waits while it is down.
pub(super) async fn ready(settings: &RunSettings) -> anyhow::Result<PgPool> {
    let options = connect_options(&settings.database_url)?;
    let shown = redact(&settings.database_url);
    let mut delay = Duration::from_secs(1);
    let mut down_since: Option<(Instant, Instant)> = None;
    loop {
        match attempt(&options, settings).await {
            Ok(pool) => {
                if let Some((since, _)) = down_since {
                    tracing::info!(
                        down_for_s = since.elapsed().as_secs(),
                        "PostgreSQL reachable again"
                    );
                }
                return Ok(pool);
            }
            Err(Failure::Fatal(e)) => {
                return Err(e.context(format!("PostgreSQL at {shown}")));
            }
            Err(Failure::Transient(e)) => {
                let now = Instant::now();
                match &mut down_since {
                    None => {
                        tracing::warn!("cannot connect to PostgreSQL at {shown}: {e:#}; retrying until it is back (check --database-url / DATABASE_URL)");
                        down_since = Some((now, now));
                    }
                    Some((since, said)) if said.elapsed() >= STILL_DOWN_EVERY => {
                        tracing::warn!(
                            down_for_s = since.elapsed().as_secs(),
                            "PostgreSQL at {shown} still unreachable: {e:#}"
                        );
                        *said = now;
                    }
                    Some(_) => tracing::debug!("PostgreSQL still unreachable: {e:#}"),
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(RETRY_MAX);
            }
        }
    }
}

async fn attempt(options: &PgConnectOptions, settings: &RunSettings) -> Result<PgPool, Failure> {
    // A connection of its own first: its error names the cause (refused, unknown
    // host, TLS, password), where a pool only says it timed out.
    let probe = tokio::time::timeout(settings.connect_timeout, options.connect())
        .await
        .map_err(|_| {
            Failure::Transient(anyhow::anyhow!(
                "no answer within --connect-timeout {}s",
                settings.connect_timeout.as_secs()
            ))
        })?
        .map_err(classify)?;
    let _ = probe.close().await;
    let pool = inbox::pool_options(settings.db_pool_size)
        .acquire_timeout(settings.connect_timeout)
        .connect_lazy_with(options.clone());
    if settings.migrate {
        inbox::migrate(&pool).await.map_err(|e| match e {
            sqlx::migrate::MigrateError::Execute(db) => match classify(db) {
                Failure::Fatal(e) => Failure::Fatal(e.context(
                    "applying the host's migrations (a login without DDL rights: run `inbox-host migrate` as an administrator and start with --no-migrate; see docs/deploy.md)",
                )),
                transient => transient,
            },
            other => Failure::Fatal(anyhow::Error::new(other).context("applying the host's migrations")),
        })?;
    } else {
        inbox::check_rights(&pool)
            .await
            .map_err(|e| match e.downcast::<sqlx::Error>() {
                Ok(db) => classify(db),
                Err(missing) => Failure::Fatal(missing),
            })?;
    }
    if let Some(role) = &settings.runner.guest_role {
        inbox::ensure_guest_role(&pool, role).await.map_err(|e| {
            match e.downcast::<sqlx::Error>() {
                Ok(db) => classify(db),
                Err(other) => Failure::Fatal(other),
            }
        })?;
    }
    Ok(pool)
}

/// Transient: the server is not there or not ready. Everything else is fatal.
fn classify(error: sqlx::Error) -> Failure {
    let transient = match &error {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            // Connection exceptions, the server starting or shutting down, too
            // many connections.
            code.starts_with("08") || code.starts_with("57P") || code == "53300"
        }),
        _ => false,
    };
    let error = anyhow::Error::new(error);
    if transient {
        Failure::Transient(error)
    } else {
        Failure::Fatal(error)
    }
}

fn connect_options(url: &str) -> anyhow::Result<PgConnectOptions> {
    url.parse::<PgConnectOptions>()
        .map(|o| o.application_name("inbox-host"))
        .with_context(|| {
            format!(
                "--database-url {} is not a PostgreSQL URL (postgres://user@host:5432/database?sslmode=require)",
                redact(url)
            )
        })
}

/// A pool for the tools (`migrate`, the lab, the demo): one attempt, the cause
/// named on failure.
pub(crate) async fn connect(url: &str, connections: u32) -> anyhow::Result<PgPool> {
    connect_in(url, connections, None).await
}

/// [`connect`] with every session's search path starting at `schema` (sent at
/// connect time, so a session reset keeps it).
pub(crate) async fn connect_in(
    url: &str,
    connections: u32,
    schema: Option<&str>,
) -> anyhow::Result<PgPool> {
    let mut options = connect_options(url)?;
    if let Some(schema) = schema {
        options = options.options([("search_path", format!("{schema},public"))]);
    }
    let fail = |e: sqlx::Error| {
        anyhow::Error::new(e).context(format!(
            "cannot connect to PostgreSQL at {}: check --database-url / DATABASE_URL",
            redact(url)
        ))
    };
    options.connect().await.map_err(fail)?.close().await.ok();
    inbox::pool_options(connections)
        .connect_with(options)
        .await
        .map_err(fail)
}

/// The URL without its password, for messages.
pub(super) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{}{user}{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_database_url_is_shown_without_its_password() {
        assert_eq!(
            super::redact("postgres://app:s3cret@db:5432/app"),
            "postgres://app@db:5432/app"
        );
        assert_eq!(super::redact("postgres://db/app"), "postgres://db/app");
    }
}
