//! The runner step with real components on a real PostgreSQL.

use std::time::{Duration, Instant};

use inbox_host::inbox::{self, FailureKind, Outcome, Runner, RunnerSettings};
use inbox_host::plugin::{Plugin, Runtime, SandboxLimits};
use inbox_host_tests::{order, plugin, Counting, TestDb};

pub fn runner(db: &TestDb) -> Runner {
    Runner::new(
        db.pool.clone(),
        RunnerSettings {
            lock_timeout: Duration::from_millis(300),
            statement_timeout: Duration::from_secs(5),
            transaction_timeout: Duration::from_secs(30),
            ..RunnerSettings::defaults("billing", "test-worker")
        },
    )
}

pub fn load(name: &str) -> Plugin {
    let limits = SandboxLimits {
        deadline: Duration::from_millis(500),
        memory_bytes: 32 << 20,
        ..SandboxLimits::default()
    };
    let runtime = Runtime::new(limits).expect("runtime");
    Plugin::load(&runtime, &plugin(name)).expect("plugin loads")
}

async fn invoices(db: &TestDb, id: &str) -> i64 {
    db.count(&format!(
        "SELECT count(*) FROM invoices WHERE message_id = '{id}'"
    ))
    .await
}

async fn inbox_rows(db: &TestDb, id: &str) -> i64 {
    db.count(&format!(
        "SELECT count(*) FROM inbox_host.inbox WHERE message_id = '{id}'"
    ))
    .await
}

#[tokio::test]
async fn billing_processes_a_new_message_into_one_invoice_and_an_inbox_row_with_its_digest() {
    let db = TestDb::start().await;
    let billing = load("billing");
    let outcome = runner(&db).process(&order("o-1", 25), &billing).await;

    assert_eq!(outcome, Outcome::Processed);
    assert_eq!(invoices(&db, "o-1").await, 1);
    let (digest, amount, marker): (String, f64, String) = sqlx::query_as(
        "SELECT i.plugin_digest, v.amount::float8, v.marker
         FROM inbox_host.inbox i JOIN invoices v USING (message_id)
         WHERE i.message_id = 'o-1' AND i.consumer_group = 'billing'",
    )
    .fetch_one(&db.pool)
    .await
    .expect("inbox row joined to its invoice");
    assert_eq!(digest, billing.digest());
    assert!(
        digest.starts_with("sha256:") && digest.len() == 7 + 64,
        "{digest}"
    );
    assert_eq!((amount, marker.as_str()), (25.0, "billing-v1"));
}

#[tokio::test]
async fn the_same_message_again_is_a_duplicate_and_the_handler_does_not_run() {
    let db = TestDb::start().await;
    let counted = Counting::new(load("call-counter"));
    db.execute("INSERT INTO handler_calls (name, calls) VALUES ('call-counter', 0)")
        .await;
    let runner = runner(&db);

    assert_eq!(
        runner.process(&order("o-1", 10), &counted).await,
        Outcome::Processed
    );
    assert_eq!(
        runner.process(&order("o-1", 10), &counted).await,
        Outcome::Duplicate
    );

    assert_eq!(counted.calls(), 1, "the handler ran for the duplicate");
    assert_eq!(db.count("SELECT calls::bigint FROM handler_calls").await, 1);
    assert_eq!(invoices(&db, "o-1").await, 1);
}

#[tokio::test]
async fn a_duplicate_is_per_consumer_group() {
    let db = TestDb::start().await;
    let billing = load("billing");
    let mut other = RunnerSettings::clone(runner(&db).settings());
    other.group = "audit".into();

    assert_eq!(
        runner(&db).process(&order("o-1", 10), &billing).await,
        Outcome::Processed
    );
    let audit = Runner::new(db.pool.clone(), other);
    assert_eq!(
        audit.process(&order("o-1", 10), &billing).await,
        Outcome::Processed
    );
    assert_eq!(invoices(&db, "o-1").await, 2);
}

#[tokio::test]
async fn write_then_panic_rolls_back_invoice_and_inbox_row_and_the_next_message_is_processed() {
    let db = TestDb::start().await;
    let runner = runner(&db);
    let outcome = runner
        .process(&order("o-1", 10), &load("panic-after-write"))
        .await;

    let Outcome::Failed(error) = outcome else {
        panic!("expected a failure, got {outcome:?}")
    };
    assert_eq!(error.kind, FailureKind::Panic);
    assert!(
        error.message.contains("panicked at")
            && error.message.contains("simulated panic after write")
            && !error.message.contains("RUST_BACKTRACE"),
        "the panic message itself: {}",
        error.message
    );
    assert_eq!(
        (invoices(&db, "o-1").await, inbox_rows(&db, "o-1").await),
        (0, 0)
    );

    assert_eq!(
        runner.process(&order("o-2", 10), &load("billing")).await,
        Outcome::Processed
    );
    assert_eq!(invoices(&db, "o-2").await, 1);
}

#[tokio::test]
async fn write_then_error_rolls_back_both_and_says_it_may_be_retried() {
    let db = TestDb::start().await;
    let runner = runner(&db);
    let outcome = runner
        .process(&order("o-1", 10), &load("error-after-write"))
        .await;

    let Outcome::Failed(error) = outcome else {
        panic!("expected a failure, got {outcome:?}")
    };
    assert_eq!(
        (error.kind, error.retryable),
        (FailureKind::HandlerError, true)
    );
    assert!(
        error.message.contains("simulated failure after write"),
        "{}",
        error.message
    );
    assert_eq!(
        (invoices(&db, "o-1").await, inbox_rows(&db, "o-1").await),
        (0, 0)
    );

    // The message comes back; the fixed handler processes it once.
    assert_eq!(
        runner.process(&order("o-1", 10), &load("billing")).await,
        Outcome::Processed
    );
    assert_eq!(
        (invoices(&db, "o-1").await, inbox_rows(&db, "o-1").await),
        (1, 1)
    );
}

#[tokio::test]
async fn a_swallowed_db_error_is_never_reported_processed_and_nothing_commits() {
    let db = TestDb::start().await;
    let outcome = runner(&db)
        .process(&order("o-1", 10), &load("swallow-db-error"))
        .await;

    let Outcome::Failed(error) = outcome else {
        panic!("expected a failure, got {outcome:?}")
    };
    assert_eq!(error.kind, FailureKind::TransactionBroken);
    assert!(
        error.message.contains("23502"),
        "names the swallowed not-null violation: {}",
        error.message
    );
    assert_eq!(
        (invoices(&db, "o-1").await, inbox_rows(&db, "o-1").await),
        (0, 0)
    );
}

#[tokio::test]
async fn a_row_held_by_another_open_transaction_is_locked_within_the_bound_then_processes() {
    let db = TestDb::start().await;
    let counted = Counting::new(load("billing"));
    let zombie = db.hold_inbox_row("o-1", 0).await;

    let started = Instant::now();
    let outcome = runner(&db).process(&order("o-1", 10), &counted).await;
    assert_eq!(outcome, Outcome::Locked);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "waited {:?}",
        started.elapsed()
    );
    assert_eq!(counted.calls(), 0, "the handler ran on a locked row");

    zombie.rollback().await.expect("rollback");
    assert_eq!(
        runner(&db).process(&order("o-1", 10), &counted).await,
        Outcome::Processed
    );
    assert_eq!(
        (invoices(&db, "o-1").await, inbox_rows(&db, "o-1").await),
        (1, 1)
    );
}

/// A handler that writes, then panics in the host's own code: the stand-in for
/// a host bug some message triggers (it once was sqlx decoding `infinity`).
struct PanicsInTheHost;

impl inbox::Handler for PanicsInTheHost {
    fn version(&self) -> &str {
        "panics-in-the-host"
    }

    async fn handle(
        &self,
        message: &inbox::Message,
        mut tx: inbox::Tx,
    ) -> (inbox::Tx, Result<inbox::AfterCommit, inbox::HandlerError>) {
        sqlx::query("INSERT INTO invoices (order_id, amount, message_id) VALUES ($1, 1, $1)")
            .bind(&message.message_id)
            .execute(&mut *tx)
            .await
            .expect("insert");
        panic!("a host bug triggered by {}", message.message_id);
    }
}

#[tokio::test]
async fn a_panic_in_the_host_while_handling_fails_that_message_rolls_back_and_the_next_is_processed(
) {
    let db = TestDb::start().await;
    let runner = runner(&db);
    let outcome = runner.process(&order("boom", 1), &PanicsInTheHost).await;
    let Outcome::Failed(error) = outcome else {
        panic!("expected a failure, got {outcome:?}")
    };
    assert_eq!(
        (error.kind, error.retryable),
        (FailureKind::HostPanic, false)
    );
    assert!(
        error.message.contains("a host bug triggered by boom"),
        "{error:?}"
    );
    assert_eq!(invoices(&db, "boom").await, 0);
    assert_eq!(inbox_rows(&db, "boom").await, 0);
    assert_eq!(
        runner.process(&order("next", 1), &load("billing")).await,
        Outcome::Processed
    );
}
