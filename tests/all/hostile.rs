//! A hostile plugin against the host: each attack must end as a failure of its
//! message (or a dead letter) within a bound, with the host unharmed, its locks
//! released and nothing committed that should not be. One attack per payload of
//! the `hostile` plugin (plugins/hostile); docs/security.md lists them.

use std::time::{Duration, Instant};

use inbox_host::inbox::{self, FailureKind, Message, Outcome, Runner, RunnerSettings};
use inbox_host::plugin::{Plugin, Runtime, SandboxLimits};
use inbox_host_tests::host::Host;
use inbox_host_tests::stage::Stage;
use inbox_host_tests::{order, plugin, wait_until, TestDb};

const LONG: Duration = Duration::from_secs(120);

fn hostile(deadline: Duration) -> Plugin {
    let limits = SandboxLimits {
        deadline,
        ..SandboxLimits::default()
    };
    let runtime = Runtime::new(limits).expect("runtime");
    Plugin::load(&runtime, &plugin("hostile")).expect("plugin loads")
}

fn runner(db: &TestDb, transaction_timeout: Duration) -> Runner {
    Runner::new(
        db.pool.clone(),
        RunnerSettings {
            lock_timeout: Duration::from_millis(300),
            statement_timeout: Duration::from_secs(1),
            transaction_timeout,
            ..RunnerSettings::defaults("billing", "hostile-test")
        },
    )
}

fn attack(id: &str, payload: &str) -> Message {
    Message {
        payload: payload.as_bytes().to_vec(),
        ..order(id, 1)
    }
}

async fn failure(runner: &Runner, plugin: &Plugin, id: &str, payload: &str) -> inbox::HandlerError {
    match runner.process(&attack(id, payload), plugin).await {
        Outcome::Failed(error) => error,
        other => panic!("`{payload}` was not a failure: {other:?}"),
    }
}

/// How long until another session can take the row lock the attack held.
async fn lock_free_after(db: &TestDb, started: Instant) -> Duration {
    let mut tx = db.pool.begin().await.expect("begin");
    sqlx::query("SET LOCAL lock_timeout = '10s'")
        .execute(&mut *tx)
        .await
        .expect("lock_timeout");
    sqlx::query("UPDATE hostile_target SET touched = touched WHERE id = 1")
        .execute(&mut *tx)
        .await
        .expect("the row lock is released");
    tx.rollback().await.expect("rollback");
    started.elapsed()
}

#[tokio::test]
async fn reading_infinite_timestamps_does_not_panic_the_host_and_they_bind_back() {
    let db = TestDb::start().await;
    let runner = runner(&db, Duration::from_secs(30));
    let plugin = hostile(Duration::from_secs(5));
    assert_eq!(
        runner.process(&attack("ts", "timestamps"), &plugin).await,
        Outcome::Processed
    );
    // The guest writes values as their Rust Debug text, less the type's name.
    let seen: Vec<(String, String)> = sqlx::query_as(
        "SELECT what, replace(value, 'Value::', '') FROM hostile_seen WHERE message_id = 'ts' ORDER BY what",
    )
    .fetch_all(&db.pool)
    .await
    .expect("rows");
    let (max, min) = (
        format!("Timestamp({})", i64::MAX),
        format!("Timestamp({})", i64::MIN),
    );
    let expected = vec![
        (
            "bound".to_string(),
            r#"[Text("infinity"), Text("-infinity")]"#.to_string(),
        ),
        ("read 0".into(), max.clone()),
        ("read 1".into(), min.clone()),
        ("read 2".into(), max),
        ("read 3".into(), min),
    ];
    assert_eq!(seen, expected);

    // A time past what the interface carries is the guest's error (IH003 naming
    // the column), not the host's panic.
    let error = failure(&runner, &plugin, "ts-max", "timestamp-max").await;
    assert!(
        error.message.contains("IH003") && error.message.contains("`last`"),
        "{error:?}"
    );
    assert_eq!(
        runner
            .process(&attack("ts-again", "timestamps"), &plugin)
            .await,
        Outcome::Processed,
        "the host still handles messages"
    );
}

/// Runs an attack that takes `hostile_target`'s row lock and holds on; returns
/// how it failed and how long until another session could take the lock.
async fn lock_attack(
    deadline: Duration,
    transaction_timeout: Duration,
    payload: &str,
) -> (inbox::HandlerError, Duration) {
    let db = TestDb::start().await;
    let runner = runner(&db, transaction_timeout);
    let started = Instant::now();
    let error = failure(&runner, &hostile(deadline), payload, payload).await;
    let free = lock_free_after(&db, started).await;
    eprintln!("`{payload}` under a {deadline:?} deadline and {transaction_timeout:?} transaction timeout: lock free after {free:?}");
    assert_eq!(
        db.count("SELECT touched::bigint FROM hostile_target WHERE id = 1")
            .await,
        0,
        "the attack's write was committed"
    );
    (error, free)
}

#[tokio::test]
async fn a_guest_sleeping_in_a_wasi_call_is_cancelled_at_its_deadline_and_its_lock_released() {
    let (error, free) = lock_attack(
        Duration::from_millis(500),
        Duration::from_secs(30),
        "sleep 30000",
    )
    .await;
    assert_eq!(error.kind, FailureKind::Deadline, "{error:?}");
    assert!(free < Duration::from_secs(3), "{free:?}");
}

#[tokio::test]
async fn a_guest_sleeping_past_the_transaction_timeout_is_cancelled_and_its_lock_released() {
    let (error, free) = lock_attack(
        Duration::from_secs(60),
        Duration::from_secs(2),
        "sleep 30000",
    )
    .await;
    assert_eq!(error.kind, FailureKind::Deadline, "{error:?}");
    assert!(
        error.message.contains("--transaction-timeout-ms"),
        "{error:?}"
    );
    assert!(free < Duration::from_secs(4), "{free:?}");
}

#[tokio::test]
async fn a_guest_running_statements_for_ever_is_cut_off_by_the_transaction_timeout() {
    let (error, free) = lock_attack(
        Duration::from_secs(60),
        Duration::from_secs(2),
        "busy-statements",
    )
    .await;
    assert_eq!(error.kind, FailureKind::Deadline, "{error:?}");
    // The transaction timeout, plus at most the statement in flight (1 s).
    assert!(free < Duration::from_secs(4), "{free:?}");
}

#[tokio::test]
async fn parameters_past_their_bounds_are_refused_before_anything_is_sent() {
    let db = TestDb::start().await;
    let runner = runner(&db, Duration::from_secs(30));
    let plugin = hostile(Duration::from_secs(5));
    for (payload, expected) in [
        ("params 70000", "IH002"),
        ("big-param 25000000", "IH002"),
        ("param-mismatch", "08P01"),
    ] {
        let error = failure(&runner, &plugin, payload, payload).await;
        // The guest's mistake, never a lost connection (which is retried for ever).
        assert_eq!(
            error.kind,
            FailureKind::HandlerError,
            "{payload}: {error:?}"
        );
        assert!(error.message.contains(expected), "{payload}: {error:?}");
    }
}

#[tokio::test]
async fn a_result_of_many_nulls_counts_against_the_result_bound() {
    let db = TestDb::start().await;
    let runner = runner(&db, Duration::from_secs(30));
    let error = failure(
        &runner,
        &hostile(Duration::from_secs(5)),
        "nulls",
        "nulls 100000",
    )
    .await;
    assert!(error.message.contains("IH004"), "{error:?}");
}

#[tokio::test]
async fn a_statement_whose_result_is_refused_commits_nothing_even_if_the_guest_returns_ok() {
    let db = TestDb::start().await;
    let runner = runner(&db, Duration::from_secs(30));
    let error = failure(
        &runner,
        &hostile(Duration::from_secs(5)),
        "refused",
        "refused-result",
    )
    .await;
    assert_eq!(error.kind, FailureKind::TransactionBroken, "{error:?}");
    assert!(error.message.contains("IH003"), "{error:?}");
    assert_eq!(db.count("SELECT count(*) FROM hostile_seen").await, 0);
    assert_eq!(db.count("SELECT count(*) FROM inbox_host.inbox").await, 0);
}

/// A retryable failure whose text PostgreSQL cannot store (a NUL byte), and one
/// of 24 MiB, each still end as a dead letter after `--max-attempts`, with the
/// text bounded; guest output and refusals are bounded in the log.
#[tokio::test(flavor = "multi_thread")]
async fn hostile_failure_text_and_output_end_bounded_and_never_stall_the_partition() {
    let stage = Stage::new(1).await;
    let records = [
        ("nul", "error-nul"),
        ("huge", "error-huge 25165824"),
        ("print", "print 3000"),
        ("refusals", "refusals 1000"),
    ]
    .into_iter()
    .map(|(id, payload)| stage.record(id, Some(0), payload))
    .collect();
    stage.produce(records).await;
    let host: Host = stage.spawn_host(&plugin("hostile"), &["--max-attempts", "3"]);
    wait_until("all four records done and committed", LONG, || async {
        stage.committed(0).await == Some(4)
    })
    .await;

    let letters: Vec<(String, i32, i32)> = sqlx::query_as(
        "SELECT message_id, length(reason), attempts FROM inbox_host.dead_letters
         ORDER BY message_id",
    )
    .fetch_all(&stage.db.pool)
    .await
    .expect("dead letters");
    let ids: Vec<&str> = letters.iter().map(|(id, _, _)| id.as_str()).collect();
    // A refused statement fails the run even when the guest returns ok after it.
    assert_eq!(ids, ["huge", "nul", "refusals"]);
    for (id, reason_len, attempts) in &letters {
        assert_eq!(*attempts, 3, "{id}");
        assert!(
            *reason_len <= 4_200,
            "{id}: reason of {reason_len} characters"
        );
    }
    // The attempts rows (whose last_error is bounded like the reason) go with
    // their set-aside records.
    assert_eq!(
        stage
            .db
            .count("SELECT count(*) FROM inbox_host.attempts")
            .await,
        0
    );
    assert_eq!(
        stage
            .db
            .count(
                "SELECT count(*) FROM inbox_host.inbox WHERE message_id IN ('print', 'refusals')"
            )
            .await,
        1
    );

    let log = host.log();
    eprintln!("host log after the attacks: {} bytes", log.len());
    assert!(log.len() < 512 << 10, "{} bytes of log", log.len());
    assert!(
        log.contains("more lines not logged"),
        "guest output summarised"
    );
    assert!(
        log.contains("more refusals in this message not logged"),
        "refusals summarised"
    );
    assert!(
        log.contains("guest stdout: "),
        "guest lines are marked as the guest's"
    );
    assert!(
        !log.lines()
            .any(|l| l.starts_with("2026-01-01T00:00:00Z  INFO inbox_host: forged")),
        "a guest line passed as a host line"
    );
}

/// 100,000 rows of 400 NULLs once cost the host 2.2 GB; a 24 MiB parameter went
/// through. Each now ends as the guest's failure and a dead letter, and the
/// host's peak memory stays within its own size plus the bounds (64 MiB guest,
/// 16 MiB result) and a stated slack.
#[tokio::test(flavor = "multi_thread")]
async fn memory_attacks_end_as_dead_letters_with_the_hosts_peak_memory_bounded() {
    let stage = Stage::new(1).await;
    let records = [("nulls", "nulls 100000"), ("big", "big-param 25000000")]
        .into_iter()
        .map(|(id, payload)| stage.record(id, Some(0), payload))
        .collect();
    stage
        .produce(vec![stage.record("warm-up", Some(0), "print 1")])
        .await;
    let host: Host = stage.spawn_host(&plugin("hostile"), &[]);
    wait_until("a first harmless record handled", LONG, || async {
        stage.committed(0).await == Some(1)
    })
    .await;
    let before = host.peak_rss_bytes();
    stage.produce(records).await;
    wait_until("both attacks set aside and committed", LONG, || async {
        stage.committed(0).await == Some(3)
    })
    .await;
    assert_eq!(
        stage
            .db
            .count("SELECT count(*) FROM inbox_host.dead_letters")
            .await,
        2
    );
    let grew = host.peak_rss_bytes().saturating_sub(before);
    eprintln!("host peak RSS grew by {} MiB", grew >> 20);
    // Guest memory (64 MiB) + result bound (16 MiB) + parameter copies (24 MiB
    // across the guest boundary) + slack for allocator and debug build.
    assert!(grew < 256 << 20, "peak RSS grew by {} MiB", grew >> 20);
}

/// One row of 512 MiB once raised the host's RSS by ~1.5 GB before the 16 MiB
/// result bound refused it: the bound was checked after the row was buffered.
/// The server now measures each row before sending it; the host's peak RSS
/// stays under 3x `--guest-memory-mib`.
#[tokio::test(flavor = "multi_thread")]
async fn a_giant_result_row_is_refused_by_the_server_before_the_host_holds_it() {
    let stage = Stage::new(1).await;
    stage
        .produce(vec![stage.record("warm-up", Some(0), "query:SELECT 1")])
        .await;
    // Building a 512 MiB value takes the server seconds: the timeouts are put
    // out of the way so the size bound is what refuses it.
    let host: Host = stage.spawn_host(
        &plugin("sql-runner"),
        &[
            "--statement-timeout-ms",
            "300000",
            "--transaction-timeout-ms",
            "600000",
        ],
    );
    wait_until("a first harmless record handled", LONG, || async {
        stage.committed(0).await == Some(1)
    })
    .await;
    let before = host.peak_rss_bytes();
    stage
        .produce(vec![
            stage.record("one", Some(0), "query:SELECT repeat('x', 536870912) AS v"),
            stage.record(
                "many",
                Some(0),
                "query:SELECT n, repeat('y', 200000000) FROM generate_series(1, 3) n",
            ),
        ])
        .await;
    wait_until(
        "both set aside and committed",
        Duration::from_secs(300),
        || async { stage.committed(0).await == Some(3) },
    )
    .await;
    let reasons: Vec<String> =
        sqlx::query_scalar("SELECT reason FROM inbox_host.dead_letters ORDER BY message_id")
            .fetch_all(&stage.db.pool)
            .await
            .expect("dead letters");
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    for reason in &reasons {
        assert!(reason.contains("IH004"), "{reason}");
    }
    let grew = host.peak_rss_bytes().saturating_sub(before);
    eprintln!("host peak RSS grew by {} MiB", grew >> 20);
    assert!(grew < 3 * (64 << 20), "peak RSS grew by {} MiB", grew >> 20);
}

#[tokio::test]
async fn every_value_type_crosses_at_its_extremes_in_both_directions() {
    let db = TestDb::start().await;
    let runner = runner(&db, Duration::from_secs(30));
    assert_eq!(
        runner
            .process(
                &attack("extremes", "extremes"),
                &hostile(Duration::from_secs(5))
            )
            .await,
        Outcome::Processed
    );
    let seen: Vec<String> = sqlx::query_scalar(
        "SELECT replace(value, 'Value::', '') FROM hostile_seen WHERE message_id = 'extremes' ORDER BY what",
    )
    .fetch_all(&db.pool)
    .await
    .expect("rows");
    let expected = [
        r#"Int32(2147483647) -> [Text("2147483647")]"#,
        r#"Int32(-2147483648) -> [Text("-2147483648")]"#,
        r#"Int64(9223372036854775807) -> [Text("9223372036854775807")]"#,
        r#"Int64(-9223372036854775808) -> [Text("-9223372036854775808")]"#,
        r#"Int32(32767) -> [Text("32767")]"#,
        r#"Int32(-32768) -> [Text("-32768")]"#,
        r#"Float64(NaN) -> [Text("NaN")]"#,
        r#"Float64(inf) -> [Text("Infinity")]"#,
        r#"Float64(-inf) -> [Text("-Infinity")]"#,
        r#"Text("") -> [Text("")]"#,
        r#"Bytes([]) -> [Text("\\x")]"#,
        r#"Json("null") -> [Text("null")]"#,
        r#"Json("[]") -> [Text("[]")]"#,
        r#"Boolean(true) -> [Text("true")]"#,
    ];
    assert_eq!(seen, expected);
}

/// Every attack in a row against the real binary: the host survives them all
/// (no restart, no panic in its log), each ends as documented within its bound
/// (processed, or set aside after its attempts), and a harmless record after
/// them is handled.
#[tokio::test(flavor = "multi_thread")]
async fn the_binary_survives_every_attack_in_a_row_and_each_ends_as_documented() {
    let stage = Stage::new(1).await;
    let attacks = [
        ("timestamps", "timestamps"),
        ("timestamp-max", "timestamp-max"),
        ("extremes", "extremes"),
        ("sleep", "sleep 30000"),
        ("busy", "busy-statements"),
        ("params", "params 70000"),
        ("big-param", "big-param 25000000"),
        ("nulls", "nulls 100000"),
        ("refused-result", "refused-result"),
        ("slow-check", "slow-check"),
        ("harmless", "print 1"),
    ];
    let records = attacks
        .iter()
        .map(|(id, payload)| stage.record(id, Some(0), *payload))
        .collect();
    stage.produce(records).await;
    let started = Instant::now();
    let mut host: Host = stage.spawn_host(
        &plugin("hostile"),
        &[
            "--guest-deadline-ms",
            "500",
            "--transaction-timeout-ms",
            "2000",
            "--statement-timeout-ms",
            "1000",
            "--max-attempts",
            "2",
            "--max-fatal-attempts",
            "2",
        ],
    );
    wait_until("every attack done and committed", LONG, || async {
        stage.committed(0).await == Some(attacks.len() as i64)
    })
    .await;
    eprintln!(
        "{} attacks handled in {:?}",
        attacks.len(),
        started.elapsed()
    );
    assert!(host.is_running(), "the host exited:\n{}", host.log());
    assert!(!host.log().contains("panicked"), "{}", host.log());

    let processed: Vec<String> =
        sqlx::query_scalar("SELECT message_id FROM inbox_host.inbox ORDER BY kafka_offset")
            .fetch_all(&stage.db.pool)
            .await
            .expect("inbox");
    assert_eq!(processed, ["timestamps", "extremes", "harmless"]);
    let letters: Vec<(String, String)> = sqlx::query_as(
        "SELECT message_id, reason FROM inbox_host.dead_letters ORDER BY kafka_offset",
    )
    .fetch_all(&stage.db.pool)
    .await
    .expect("dead letters");
    let expected = [
        ("timestamp-max", "IH003"),
        ("sleep", "deadline"),
        ("busy", "--transaction-timeout-ms"),
        ("params", "IH002"),
        ("big-param", "IH002"),
        ("nulls", "IH004"),
        ("refused-result", "transaction-broken"),
        ("slow-check", "IH001"),
    ];
    assert_eq!(letters.len(), expected.len(), "{letters:#?}");
    for ((id, reason), (expected_id, cause)) in letters.iter().zip(expected) {
        assert_eq!(id, expected_id);
        assert!(reason.contains(cause), "{id}: {reason}");
    }
    assert_eq!(
        stage
            .db
            .count("SELECT touched::bigint FROM hostile_target WHERE id = 1")
            .await,
        0
    );
    assert!(host.stop(), "{}", host.log());
}
