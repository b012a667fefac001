//! Batched inbox transactions (`Runner::process_batch`) with real components on
//! a real PostgreSQL: what commits, what runs, and in which order.

use inbox_host::inbox::{Message, Outcome};
use inbox_host_tests::{order, Counting, TestDb};

use crate::inbox_core::{load, runner};

fn statement(id: &str, offset: i64, sql: &str) -> Message {
    Message {
        offset,
        timestamp_ms: None,
        payload: sql.as_bytes().to_vec(),
        ..order(id, 0)
    }
}

async fn seen(db: &TestDb) -> Vec<i32> {
    sqlx::query_scalar("SELECT n FROM seen ORDER BY seq")
        .fetch_all(&db.pool)
        .await
        .expect("seen")
}

async fn inbox_ids(db: &TestDb) -> Vec<String> {
    sqlx::query_scalar("SELECT message_id FROM inbox_host.inbox ORDER BY kafka_offset, message_id")
        .fetch_all(&db.pool)
        .await
        .expect("inbox rows")
}

#[tokio::test]
async fn a_failure_in_the_middle_of_a_batch_commits_the_records_before_it_once_and_nothing_after_it(
) {
    let db = TestDb::start().await;
    db.execute(
        "CREATE TABLE seen (seq bigserial PRIMARY KEY, n int NOT NULL); CREATE TABLE gate (open int);
         GRANT INSERT, SELECT ON seen, gate TO inbox_guest; GRANT USAGE ON SEQUENCE seen_seq_seq TO inbox_guest;",
    )
    .await;
    let sql_runner = Counting::new(load("sql-runner"));
    // Message 2 divides by the number of rows in `gate`: it fails until the gate opens.
    let messages: Vec<Message> = (0..5)
        .map(|n| {
            let value = if n == 2 {
                "2 / (SELECT count(*) FROM gate)::int".to_string()
            } else {
                n.to_string()
            };
            statement(
                &format!("m-{n}"),
                n,
                &format!("INSERT INTO seen (n) VALUES ({value})"),
            )
        })
        .collect();
    let all: Vec<&Message> = messages.iter().collect();
    let runner = runner(&db);

    let outcomes = runner.process_batch(&all, &sql_runner).await;
    assert_eq!(outcomes.len(), 3, "{outcomes:?}");
    assert_eq!(&outcomes[..2], &[Outcome::Processed, Outcome::Processed]);
    assert!(
        matches!(&outcomes[2], Outcome::Failed(e) if e.message.contains("division by zero")),
        "{outcomes:?}"
    );
    assert_eq!(
        seen(&db).await,
        [0, 1],
        "the records before the failure commit, once"
    );
    assert_eq!(
        inbox_ids(&db).await,
        ["m-0", "m-1"],
        "nothing after the failure commits"
    );

    db.execute("INSERT INTO gate VALUES (1)").await;
    let outcomes = runner.process_batch(&all[2..], &sql_runner).await;
    assert_eq!(outcomes, vec![Outcome::Processed; 3]);
    assert_eq!(
        seen(&db).await,
        [0, 1, 2, 3, 4],
        "every effect once, in offset order"
    );
    assert_eq!(inbox_ids(&db).await, ["m-0", "m-1", "m-2", "m-3", "m-4"]);
}

#[tokio::test]
async fn duplicates_inside_one_batch_and_across_batches_skip_the_handler() {
    let db = TestDb::start().await;
    let billing = Counting::new(load("billing"));
    let runner = runner(&db);
    let (a, b, c) = (order("a", 1), order("b", 2), order("c", 3));

    let outcomes = runner.process_batch(&[&a, &b, &a], &billing).await;
    assert_eq!(
        outcomes,
        [Outcome::Processed, Outcome::Processed, Outcome::Duplicate]
    );
    assert_eq!(
        billing.calls(),
        2,
        "the second `a` in the batch ran the handler"
    );

    let outcomes = runner.process_batch(&[&b, &c], &billing).await;
    assert_eq!(outcomes, [Outcome::Duplicate, Outcome::Processed]);
    assert_eq!(
        billing.calls(),
        3,
        "`b` from an earlier batch ran the handler again"
    );
    assert_eq!(db.count("SELECT count(*) FROM invoices").await, 3);
    assert_eq!(
        db.count("SELECT count(DISTINCT message_id) FROM invoices")
            .await,
        3
    );
}

#[tokio::test]
async fn a_row_held_by_another_transaction_in_a_batch_runs_no_handler_for_it_and_commits_nothing_past_it(
) {
    let db = TestDb::start().await;
    let billing = Counting::new(load("billing"));
    let zombie = db.hold_inbox_row("o-1", 1).await;
    let messages: Vec<Message> = (0..3)
        .map(|n| Message {
            offset: n,
            timestamp_ms: None,
            ..order(&format!("o-{n}"), 10)
        })
        .collect();
    let all: Vec<&Message> = messages.iter().collect();

    let outcomes = runner(&db).process_batch(&all, &billing).await;
    assert_eq!(outcomes, [Outcome::Processed, Outcome::Locked]);
    assert_eq!(
        billing.calls(),
        1,
        "only o-0 ran (after the batch fell back to one record at a time)"
    );
    zombie.rollback().await.expect("rollback");
    let invoiced: Vec<String> =
        sqlx::query_scalar("SELECT message_id FROM invoices ORDER BY message_id")
            .fetch_all(&db.pool)
            .await
            .expect("invoices");
    assert_eq!(invoiced, ["o-0"]);
    assert_eq!(inbox_ids(&db).await, ["o-0"]);
}

#[tokio::test]
async fn a_handler_that_fails_after_a_refused_statement_is_a_fatal_db_rule_failure() {
    let db = TestDb::start().await;
    let sql_runner = load("sql-runner");
    let refused = statement("r-1", 0, "ROLLBACK");

    let outcome = runner(&db).process(&refused, &sql_runner).await;
    let Outcome::Failed(error) = outcome else {
        panic!("a refused statement was not a failure: {outcome:?}");
    };
    assert_eq!(
        error.kind,
        inbox_host::inbox::FailureKind::DbRule,
        "{error}"
    );
    assert!(
        !error.retryable,
        "waiting cannot fix a refused statement: {error}"
    );
    assert!(error.message.contains("IH001"), "{error}");
}

/// A plugin built with the SDK of inbox-host 0.3 (WIT `inbox:host@0.2.0`, kept as
/// a fixture) runs unchanged on this host: its `db` calls reach the transaction
/// and a failed statement still comes back as a `db-error` it can report.
#[tokio::test]
async fn a_plugin_built_against_the_previous_contract_runs_unchanged() {
    use inbox_host::plugin::{Plugin, Runtime, SandboxLimits};
    let db = TestDb::start().await;
    db.execute("CREATE TABLE seen (n int); GRANT INSERT ON seen TO inbox_guest")
        .await;
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/sql-runner-built-for-inbox-host-0.3.0.wasm");
    let runtime = Runtime::new(SandboxLimits::default()).expect("runtime");
    let old = Plugin::load(&runtime, &fixture).expect("a 0.2.0 plugin loads");
    let runner = runner(&db);
    let done = runner
        .process(&statement("old-1", 0, "INSERT INTO seen VALUES (7)"), &old)
        .await;
    assert_eq!(done, Outcome::Processed);
    let failed = runner
        .process(
            &statement("old-2", 1, "INSERT INTO missing VALUES (1)"),
            &old,
        )
        .await;
    let Outcome::Failed(error) = failed else {
        panic!("expected a failure, got {failed:?}")
    };
    assert!(error.message.contains("42P01"), "{}", error.message);
    assert_eq!(db.count("SELECT count(*)::bigint FROM seen").await, 1);
}
