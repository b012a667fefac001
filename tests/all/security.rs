//! Hostile guest SQL: one attack per case through the sql-runner plugin, on a
//! runner whose pool has one connection, so "the next message" really reuses the
//! attacker's session.

use std::time::Duration;

use inbox_host::inbox::{self, Message, Outcome, Runner, RunnerSettings};
use inbox_host_tests::{order, TestDb};
use sqlx::postgres::PgPool;

use crate::inbox_core::load;

struct Arena {
    db: TestDb,
    pool: PgPool,
    runner: Runner,
}

/// What a reused session could leak: who it is, its settings, its locks, its
/// subscriptions, and which backend it is (to prove it is the same connection).
#[derive(Debug, PartialEq)]
struct Session {
    pid: i32,
    user: String,
    statement_timeout: String,
    advisory_locks: i64,
    listening: i64,
}

impl Arena {
    async fn new() -> Self {
        Self::with_statement_timeout(Duration::from_millis(1_000)).await
    }

    async fn with_statement_timeout(statement_timeout: Duration) -> Self {
        let db = TestDb::start().await;
        let pool = inbox::pool_options(1).connect(&db.url).await.expect("pool");
        let runner = Runner::new(
            pool.clone(),
            RunnerSettings {
                lock_timeout: Duration::from_millis(300),
                statement_timeout,
                transaction_timeout: Duration::from_secs(30),
                ..RunnerSettings::defaults("billing", "arena")
            },
        );
        // A message handled earlier: attacks on the inbox must leave it alone.
        assert_eq!(
            runner.process(&order("victim", 1), &load("billing")).await,
            Outcome::Processed
        );
        Self { db, pool, runner }
    }

    async fn session(&self) -> Session {
        let (pid, user, statement_timeout, advisory_locks, listening) = sqlx::query_as(
            "SELECT pg_backend_pid(), current_user::text, current_setting('statement_timeout'),
                    (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
                    (SELECT count(*) FROM pg_listening_channels())",
        )
        .fetch_one(&self.pool)
        .await
        .expect("session state");
        Session {
            pid,
            user,
            statement_timeout,
            advisory_locks,
            listening,
        }
    }

    /// Runs `sql` as a guest and checks everything a successful attack would change.
    async fn repel(&self, sql: &str) -> String {
        let before = self.session().await;
        let id = format!("attack-{:x}", fxhash(sql));
        let attack = Message {
            payload: sql.as_bytes().to_vec(),
            ..order(&id, 1)
        };
        let outcome = self.runner.process(&attack, &load("sql-runner")).await;
        let Outcome::Failed(error) = outcome else {
            panic!("`{sql}` was not refused: {outcome:?}")
        };
        let count = |q: String| async move { self.db.count(&q).await };
        assert_eq!(
            count(format!(
                "SELECT count(*) FROM inbox_host.inbox WHERE message_id = '{id}'"
            ))
            .await,
            0,
            "{sql}"
        );
        assert_eq!(
            count("SELECT count(*) FROM inbox_host.inbox WHERE message_id = 'victim'".into()).await,
            1,
            "{sql}"
        );
        assert_eq!(
            self.session().await,
            before,
            "`{sql}` leaked into the session"
        );

        // The next normal message on the same connection is handled normally.
        let next = format!("after-{id}");
        assert_eq!(
            self.runner
                .process(&order(&next, 2), &load("billing"))
                .await,
            Outcome::Processed,
            "{sql}"
        );
        assert_eq!(
            count(format!(
                "SELECT count(*) FROM invoices WHERE message_id = '{next}'"
            ))
            .await,
            1
        );
        error.message
    }
}

fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

async fn refused(cases: &[&str]) {
    let arena = Arena::new().await;
    for sql in cases {
        let message = arena.repel(sql).await;
        assert!(
            message.contains("IH001") || message.contains("42501"),
            "`{sql}`: {message}"
        );
    }
}

#[tokio::test]
async fn transaction_control_cannot_end_or_restart_the_inbox_transaction() {
    refused(&[
        "COMMIT",
        "END",
        "ROLLBACK",
        "ABORT",
        "BEGIN",
        "START TRANSACTION",
        "SELECT 1; COMMIT",
        "INSERT INTO invoices (order_id, amount) VALUES ('x', 1); COMMIT",
        "SAVEPOINT a",
        "ROLLBACK TO a",
        "RELEASE a",
        "PREPARE TRANSACTION 'x'",
    ])
    .await;
}

#[tokio::test]
async fn roles_and_settings_cannot_be_changed() {
    refused(&[
        "SET ROLE postgres",
        "RESET ROLE",
        "SET SESSION AUTHORIZATION postgres",
        "SELECT set_config('role', 'postgres', false)",
        "SET statement_timeout = 0",
        "SELECT pg_catalog.set_config('statement_timeout', '0', false)",
        "SET LOCAL lock_timeout = 0",
    ])
    .await;
}

/// What an earlier message left on a pooled connection stays out of reach: the
/// SQL text sqlx keeps prepared (with its literals), and the random seed.
#[tokio::test]
async fn earlier_messages_sql_and_the_random_seed_are_out_of_reach() {
    let arena = Arena::new().await;
    let earlier = Message {
        payload: b"INSERT INTO invoices (order_id, amount) VALUES ('card 4111-1111', 1)".to_vec(),
        ..order("earlier", 1)
    };
    assert_eq!(
        arena.runner.process(&earlier, &load("sql-runner")).await,
        Outcome::Processed
    );
    for sql in [
        "query:SELECT statement FROM pg_prepared_statements",
        "query:SELECT statement FROM pg_catalog.pg_prepared_statements",
        "query:SELECT * FROM pg_prepared_statement()",
        "query:SELECT setseed(0.5)",
        "query:SELECT * FROM (SELECT setseed(0.5)) s",
    ] {
        let message = arena.repel(sql).await;
        assert!(message.contains("IH001"), "`{sql}`: {message}");
    }
}

#[tokio::test]
async fn the_inbox_table_cannot_be_read_changed_or_shadowed() {
    refused(&[
        "DELETE FROM inbox_host.inbox",
        "TRUNCATE inbox_host.inbox",
        "UPDATE inbox_host.inbox SET worker_id = 'x'",
        "SELECT * FROM inbox_host.inbox",
        "CREATE TEMP TABLE inbox (message_id text)",
        "INSERT INTO inbox_host.dead_letters (consumer_group) VALUES ('x')",
    ])
    .await;
}

#[tokio::test]
async fn locks_listens_sleeps_and_backend_control_are_refused() {
    let arena = Arena::new().await;
    let mut bystander = arena.db.pool.acquire().await.expect("bystander");
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *bystander)
        .await
        .expect("pid");
    for sql in [
        "SELECT pg_advisory_lock(1)".to_string(),
        "SELECT pg_try_advisory_lock(1)".into(),
        "LISTEN x".into(),
        "NOTIFY x".into(),
        "SELECT pg_sleep(5)".into(),
        format!("SELECT pg_terminate_backend({pid})"),
        format!("SELECT pg_cancel_backend({pid})"),
        "COPY invoices TO PROGRAM 'id'".into(),
        "SELECT dblink_exec('dbname=postgres', 'DELETE FROM inbox_host.inbox')".into(),
        "DO $$ BEGIN PERFORM 1; END $$".into(),
        "LOCK TABLE invoices".into(),
        "DISCARD ALL".into(),
    ] {
        let message = arena.repel(&sql).await;
        assert!(message.contains("IH001"), "`{sql}`: {message}");
    }
    let alive: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut *bystander)
        .await
        .expect("bystander survived");
    assert_eq!(alive, 1);
}

#[tokio::test]
async fn a_guest_query_running_past_statement_timeout_is_cancelled() {
    let arena = Arena::new().await;
    let message = arena
        .repel("SELECT count(*) FROM generate_series(1, 1000000000)")
        .await;
    assert!(message.contains("57014"), "{message}");
}

#[tokio::test]
async fn a_query_returning_more_than_the_bound_is_refused_without_buffering_it_all() {
    // The statement timeout out of the way: on a loaded machine it could end
    // the query before the bound does.
    let arena = Arena::with_statement_timeout(Duration::from_secs(120)).await;
    let message = arena
        .repel("query:SELECT g, repeat('x', 100) FROM generate_series(1, 1000000) g")
        .await;
    assert!(message.contains("IH004"), "{message}");
}

#[tokio::test]
async fn the_same_sql_bound_with_text_then_an_integer_uses_the_right_statement_each_time() {
    let db = TestDb::start().await;
    let runner = crate::inbox_core::runner(&db);
    assert_eq!(
        runner
            .process(&order("typed", 1), &load("typed-params"))
            .await,
        Outcome::Processed
    );
    let seen: (String, String) = sqlx::query_as("SELECT first, second FROM typed_probe")
        .fetch_one(&db.pool)
        .await
        .expect("row");
    assert_eq!(seen, ("text".to_string(), "bigint".to_string()));
}
