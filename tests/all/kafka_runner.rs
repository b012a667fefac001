//! The real `inbox-host` binary against a Kafka-protocol broker and PostgreSQL.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use inbox_host_tests::host::{http_body, http_get, http_request};
use inbox_host_tests::stage::Stage;
use inbox_host_tests::{host, plugin, wait_until};

const LONG: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread")]
async fn the_lab_reproduces_the_reference_table_exactly_on_the_embedded_default() {
    // Exported variables are not the lab's to use: only its own flags are.
    let exported = [
        ("DATABASE_URL", "postgres://app@127.0.0.1:1/app"),
        ("KAFKA_BROKERS", "127.0.0.1:1"),
    ];
    let out = tokio::task::spawn_blocking(move || host::run(&["lab"], &exported))
        .await
        .expect("lab");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        host::strip_ansi(&String::from_utf8_lossy(&out.stderr))
    );
    assert_eq!(stdout.lines().collect::<Vec<_>>(), LAB_TABLE);
}

const LAB_TABLE: [&str; 8] = [
    "at-most-once  first: processed=false committed=true  second consumer: nothing delivered  handler ran=1 invoices=0",
    "at-least-once, on-persist  first: processed=false committed=true  second consumer: nothing delivered  handler ran=1 invoices=0",
    "at-least-once, on-success  first: processed=false committed=false  second consumer: processed=true  handler ran=2 invoices=1",
    "exactly-once-inbox  first: processed=false committed=false  second consumer: processed=true  handler ran=2 invoices=1",
    "duplicate  delivery 1: processed=true duplicate=false committed=true invoices=1  delivery 2: processed=false duplicate=true committed=true invoices=1",
    "consume-transform-produce  first: processed=false invoices=0 published=0  second consumer: processed=true invoices=1 published=1",
    "email, request after commit  first: processed=false invoices=0 emails=0  second consumer: processed=true invoices=1 emails=1",
    "email, naive call  first: processed=false invoices=0 emails=1  second consumer: processed=true invoices=1 emails=2",
];

#[tokio::test(flavor = "multi_thread")]
async fn the_lab_on_a_given_database_works_in_a_schema_of_its_own_and_leaves_nothing_behind() {
    let db = inbox_host_tests::TestDb::start().await;
    db.execute("INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ('mine', 1, 'mine', 'app')")
        .await;
    let url = db.url.clone();
    // On another broker (`scripts/compat`), the lab runs against it.
    let brokers = inbox_host_tests::broker::running_brokers();
    let out = tokio::task::spawn_blocking(move || {
        let mut args = vec!["lab", "--database-url", &url];
        if let Some(brokers) = &brokers {
            args.extend(["--brokers", brokers]);
        }
        host::run(&args, &[])
    })
    .await
    .expect("lab");
    assert!(
        out.status.success(),
        "{}",
        host::strip_ansi(&String::from_utf8_lossy(&out.stderr))
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().collect::<Vec<_>>(), LAB_TABLE);
    assert_eq!(
        db.count("SELECT count(*) FROM public.invoices").await,
        1,
        "the lab wrote into the application's invoices"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'inbox_lab%'")
            .await,
        0,
        "the lab's schema was left behind"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM inbox_host.inbox WHERE consumer_group LIKE 'lab-%'")
            .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn no_offset_past_a_failing_message_is_committed_and_once_it_succeeds_all_eleven_run_once_in_order(
) {
    let stage = Stage::new(1).await;
    stage
        .db
        .execute(
            "CREATE TABLE seen (seq bigserial PRIMARY KEY, n int NOT NULL); CREATE TABLE gate (open int);
             GRANT INSERT, SELECT ON seen, gate TO inbox_guest; GRANT USAGE ON SEQUENCE seen_seq_seq TO inbox_guest;",
        )
        .await;
    // Message 0 divides by the number of rows in `gate`: it fails until the gate opens.
    let mut records = vec![stage.record(
        "m-0",
        Some(0),
        "INSERT INTO seen (n) VALUES (0 / (SELECT count(*) FROM gate)::int)",
    )];
    for n in 1..=10 {
        records.push(stage.record(
            &format!("m-{n}"),
            Some(0),
            format!("INSERT INTO seen (n) VALUES ({n})"),
        ));
    }
    stage.produce(records).await;
    // A failing statement is fatal; this test is about holding the partition
    // until a fix, so the budget for fatal failures is out of the way.
    let mut host = stage.spawn_host(&plugin("sql-runner"), &["--max-fatal-attempts", "1000000"]);

    let attempts = "SELECT coalesce(max(attempts), 0)::bigint FROM inbox_host.attempts";
    wait_until("three failed attempts of message 0", LONG, || async {
        stage.db.count(attempts).await >= 3
    })
    .await;
    assert_eq!(
        stage.committed(0).await.unwrap_or(0),
        0,
        "an offset past the failed message was committed"
    );
    assert_eq!(
        stage.db.count("SELECT count(*) FROM seen").await,
        0,
        "a later message ran before the failed one"
    );
    let last_error: String = sqlx::query_scalar("SELECT last_error FROM inbox_host.attempts")
        .fetch_one(&stage.db.pool)
        .await
        .expect("the failed attempts are recorded");
    assert!(last_error.contains("division by zero"), "{last_error}");

    stage.db.execute("INSERT INTO gate VALUES (1)").await;
    wait_until("all eleven handled and committed", LONG, || async {
        stage.committed(0).await == Some(11)
    })
    .await;
    let order: Vec<i32> = sqlx::query_scalar("SELECT n FROM seen ORDER BY seq")
        .fetch_all(&stage.db.pool)
        .await
        .expect("seen");
    assert_eq!(order, (0..=10).collect::<Vec<_>>());
    assert_eq!(
        stage
            .db
            .count("SELECT count(*) FROM inbox_host.inbox")
            .await,
        11
    );
    assert!(
        host.stop(),
        "the host did not exit cleanly on SIGTERM:\n{}",
        host.log()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn five_thousand_messages_survive_three_sigkills_with_no_loss_and_no_duplicate_effect() {
    const TOTAL: i64 = 5_000;
    let stage = Stage::new(3).await;
    stage
        .produce(
            (0..TOTAL)
                .map(|n| stage.order(&format!("order-{n}"), n))
                .collect(),
        )
        .await;
    let kill_points = random_kill_points(TOTAL);
    let fast_rejoin = ["--kafka-opt", "session.timeout.ms=6000"];

    for kill_at in kill_points {
        let mut host = stage.spawn_host(&plugin("billing"), &fast_rejoin);
        wait_until(
            &format!("{kill_at} invoices before the kill"),
            LONG,
            || async { stage.db.count("SELECT count(*) FROM invoices").await >= kill_at },
        )
        .await;
        host.kill_hard();
    }
    let mut host = stage.spawn_host(&plugin("billing"), &fast_rejoin);
    wait_until("every order invoiced", LONG, || async {
        stage.db.count("SELECT count(*) FROM invoices").await >= TOTAL
    })
    .await;
    wait_until("every offset committed", LONG, || async {
        let mut sum = 0;
        for p in 0..3 {
            sum += stage.committed(p).await.unwrap_or(0);
        }
        sum == TOTAL
    })
    .await;
    assert!(host.stop(), "{}", host.log());

    assert_eq!(stage.db.count("SELECT count(*) FROM invoices").await, TOTAL);
    assert_eq!(
        stage
            .db
            .count("SELECT count(DISTINCT message_id) FROM invoices")
            .await,
        TOTAL
    );
    assert_eq!(
        stage
            .db
            .count("SELECT count(*) FROM inbox_host.inbox")
            .await,
        TOTAL
    );
}

/// Three increasing points in (5%, 85%) of `total`, different each run.
fn random_kill_points(total: i64) -> Vec<i64> {
    let mut seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64
        | 1;
    let mut points: Vec<i64> = (0..3)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            total / 20 + (seed % (total as u64 * 8 / 10)) as i64
        })
        .collect();
    points.sort();
    eprintln!("killing the host with SIGKILL at {points:?} invoices");
    points
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hosts_split_the_partitions_and_a_stopped_hosts_partitions_move_without_loss() {
    let stage = Stage::new(4).await;
    let mut a = stage.spawn_host(&plugin("billing"), &["--worker-id", "host-a"]);
    // The second joins a formed group (a broker may handle two joins racing
    // each other badly: docs/deploy.md, "Tested against").
    wait_until("host a assigned partitions", LONG, || async {
        a.metric("inbox_host_assigned_partitions") == Some(4.0)
    })
    .await;
    let mut b = stage.spawn_host(&plugin("billing"), &["--worker-id", "host-b"]);
    wait_until("both hosts assigned partitions", LONG, || async {
        [&a, &b].iter().all(|h| {
            h.metric("inbox_host_assigned_partitions")
                .is_some_and(|n| n > 0.0)
        })
    })
    .await;
    stage
        .produce(
            (0..200)
                .map(|n| stage.order(&format!("first-{n}"), n))
                .collect(),
        )
        .await;
    wait_until("the first 200 invoiced", LONG, || async {
        stage.db.count("SELECT count(*) FROM invoices").await == 200
    })
    .await;
    let workers = stage
        .db
        .count("SELECT count(DISTINCT worker_id) FROM inbox_host.inbox")
        .await;
    assert_eq!(
        workers, 2,
        "both hosts should have handled part of the stream"
    );

    assert!(a.stop(), "host a did not stop cleanly:\n{}", a.log());
    stage
        .produce(
            (0..200)
                .map(|n| stage.order(&format!("second-{n}"), n))
                .collect(),
        )
        .await;
    wait_until("the second 200 invoiced by host b", LONG, || async {
        stage.db.count("SELECT count(*) FROM invoices").await == 400
    })
    .await;
    let by_b = stage
        .db
        .count("SELECT count(*) FROM inbox_host.inbox WHERE message_id LIKE 'second-%' AND worker_id = 'host-b'")
        .await;
    assert_eq!(by_b, 200);
    assert_eq!(
        stage
            .db
            .count("SELECT count(DISTINCT message_id) FROM invoices")
            .await,
        400
    );
    assert!(b.stop(), "{}", b.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn records_the_host_cannot_use_are_set_aside_with_a_reason_and_never_skipped_silently() {
    let stage = Stage::new(1).await;
    let mut no_id = stage.record("unused", Some(0), r#"{"order_id": "x", "amount": 1}"#);
    no_id.headers.clear();
    let oversized = stage.record(
        "big",
        Some(0),
        format!(
            r#"{{"order_id": "big", "amount": 1, "pad": "{}"}}"#,
            "x".repeat(500)
        ),
    );
    let mut unparseable = stage.record("bad-json", Some(0), "this is not json");
    unparseable
        .headers
        .push(("trace".into(), vec![0xff, 0x00, 0x41]));
    let good = stage.record("good", Some(0), r#"{"order_id": "good", "amount": 5}"#);
    stage
        .produce(vec![no_id, oversized, unparseable, good])
        .await;

    let mut host = stage.spawn_host(
        &plugin("billing"),
        &[
            "--message-id",
            "header:message_id",
            "--max-message-bytes",
            "200",
            "--max-attempts",
            "2",
        ],
    );
    wait_until("the good order invoiced", LONG, || async {
        stage
            .db
            .count("SELECT count(*) FROM invoices WHERE message_id = 'good'")
            .await
            == 1
    })
    .await;
    let reasons: Vec<(i64, String)> = sqlx::query_as(
        "SELECT kafka_offset, reason FROM inbox_host.dead_letters ORDER BY kafka_offset",
    )
    .fetch_all(&stage.db.pool)
    .await
    .expect("dead letters");
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(reasons[0].1.contains("no message id found"), "{reasons:?}");
    assert!(
        reasons[1].1.contains("exceeds --max-message-bytes 200"),
        "{reasons:?}"
    );
    assert!(
        reasons[2].1.contains("failed 2 times") && reasons[2].1.contains("payload"),
        "{reasons:?}"
    );
    let kept: Vec<u8> =
        sqlx::query_scalar("SELECT payload FROM inbox_host.dead_letters WHERE kafka_offset = 2")
            .fetch_one(&stage.db.pool)
            .await
            .expect("payload kept");
    assert_eq!(kept, b"this is not json");
    let headers: serde_json::Value =
        sqlx::query_scalar("SELECT headers FROM inbox_host.dead_letters WHERE kafka_offset = 2")
            .fetch_one(&stage.db.pool)
            .await
            .expect("headers kept");
    assert_eq!(
        headers,
        serde_json::json!([{ "key": "message_id", "value": "bad-json" }, { "key": "trace", "value_hex": "ff0041" }])
    );
    assert_eq!(
        host.log()
            .matches("set aside in inbox_host.dead_letters")
            .count(),
        3,
        "{}",
        host.log()
    );
    // Offsets are committed asynchronously (every second, and on leaving).
    wait_until("the offset past all four committed", LONG, || async {
        stage.committed(0).await == Some(4)
    })
    .await;
    assert!(host.stop());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_status_endpoint_serves_metrics_promtool_accepts_and_health_and_logs_are_json() {
    let stage = Stage::new(1).await;
    let host = stage.spawn_host(
        &plugin("billing"),
        &["--max-attempts", "2", "--log-format", "json"],
    );
    let addr = host.status_addr().await;
    let mut records: Vec<_> = (0..3).map(|n| stage.order(&format!("ok-{n}"), n)).collect();
    records.push(stage.record("bad", Some(0), "not json"));
    stage.produce(records).await;
    wait_until(
        "the bad record set aside and every offset committed",
        LONG,
        || async { stage.committed(0).await == Some(4) },
    )
    .await;

    let metrics = http_body(&http_get(&addr, "/metrics")).to_string();
    for sample in [
        "inbox_host_messages_total{outcome=\"processed\"} 3",
        "inbox_host_messages_total{outcome=\"failed\",kind=\"handler-error\"} 1",
        "inbox_host_messages_total{outcome=\"set_aside\"} 1",
        "inbox_host_dead_letters_total{kind=\"handler-error\"} 1",
        "inbox_host_assigned_partitions 1",
        "inbox_host_batch_size_count ",
        "inbox_host_transaction_duration_seconds_bucket{le=",
        "inbox_host_end_to_end_latency_seconds_count 4",
        "inbox_host_db_connections{state=\"idle\"}",
        "inbox_host_build_info{version=",
        "inbox_host_guest_run_seconds_total ",
    ] {
        assert!(metrics.contains(sample), "no `{sample}` in:\n{metrics}");
    }
    let digest = inbox_host::plugin::digest_of(&std::fs::read(plugin("billing")).expect("billing"));
    assert!(
        metrics.contains(&format!("inbox_host_plugin{{digest=\"{digest}\"}} 1")),
        "{metrics}"
    );
    let checked = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut promtool| {
            use std::io::Write;
            promtool
                .stdin
                .take()
                .expect("stdin")
                .write_all(metrics.as_bytes())?;
            promtool.wait_with_output()
        })
        .expect("promtool (scripts/setup installs Debian's prometheus package)");
    assert!(
        checked.status.success() && checked.stdout.is_empty() && checked.stderr.is_empty(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );

    let ready = http_get(&addr, "/health/ready");
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    let ready: serde_json::Value = serde_json::from_str(http_body(&ready)).expect("JSON");
    assert_eq!(ready["ready"], true);
    assert_eq!(ready["plugin"], digest.as_str());
    assert!(http_get(&addr, "/health/live").starts_with("HTTP/1.1 200"));
    assert!(http_get(&addr, "/health").contains(&format!("ok plugin={digest}")));
    assert!(http_request(&addr, "HEAD", "/health/ready").starts_with("HTTP/1.1 200"));
    assert!(http_get(&addr, "/health/readyz").starts_with("HTTP/1.1 404"));
    assert!(http_get(&addr, "/metrics/").starts_with("HTTP/1.1 404"));

    let log = host.log();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines.iter().any(|l| l["message_id"] == "bad"
            && l["kind"] == "handler-error"
            && l["level"] == "WARN"),
        "no JSON line for the failed record:\n{log}"
    );
    drop(host);
}

/// A partition held by a failing record: its lag shows in `/metrics` and,
/// after `--stall-after`, `/health/ready` names it; once the cause is fixed
/// the partition drains, lag falls to 0 and the host is ready again.
#[tokio::test(flavor = "multi_thread")]
async fn a_stuck_partition_shows_as_lag_and_not_ready_until_it_drains() {
    let stage = Stage::new(1).await;
    stage
        .db
        .execute("CREATE TABLE gate (open int); GRANT SELECT ON gate TO inbox_guest")
        .await;
    let mut records = vec![stage.record(
        "gated",
        Some(0),
        "SELECT 1 / (SELECT count(*)::int FROM gate)",
    )];
    records.extend((0..20).map(|n| stage.record(&format!("after-{n}"), Some(0), "SELECT 1")));
    stage.produce(records).await;
    let mut host = stage.spawn_host(
        &plugin("sql-runner"),
        &["--stall-after-secs", "3", "--max-fatal-attempts", "1000000"],
    );
    let addr = host.status_addr().await;
    let lag = || {
        let metrics = http_body(&http_get(&addr, "/metrics")).to_string();
        metrics
            .lines()
            .find(|l| l.starts_with("inbox_host_consumer_lag{"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<i64>().ok())
    };
    let ready = || http_get(&addr, "/health/ready");
    assert!(host.is_running(), "{}", host.log());
    wait_until("the held partition's lag in /metrics", LONG, || async {
        lag() == Some(21)
    })
    .await;
    wait_until(
        "/health/ready names the stalled partition",
        LONG,
        || async {
            let answer = ready();
            answer.starts_with("HTTP/1.1 503") && answer.contains("made no progress")
        },
    )
    .await;
    let attempts = http_body(&http_get(&addr, "/metrics")).to_string();
    assert!(
        attempts
            .lines()
            .any(|l| l.starts_with("inbox_host_held_record_attempts{") && !l.ends_with(" 0")),
        "{attempts}"
    );

    stage.db.execute("INSERT INTO gate VALUES (1)").await;
    wait_until("drained: lag 0", LONG, || async { lag() == Some(0) }).await;
    wait_until("ready again", LONG, || async {
        ready().starts_with("HTTP/1.1 200")
    })
    .await;
    wait_until("all 21 committed", LONG, || async {
        stage.committed(0).await == Some(21)
    })
    .await;
    drop(host);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_attempt_budget_is_counted_outside_the_transaction_and_survives_a_restart() {
    let stage = Stage::new(1).await;
    stage
        .produce(vec![
            stage.record("poison", Some(0), "not json"),
            stage.record("after", Some(0), r#"{"order_id": "after", "amount": 1}"#),
        ])
        .await;
    let attempts = || async {
        stage.db.count("SELECT coalesce(max(attempts), 0)::bigint FROM inbox_host.attempts WHERE message_id = 'poison'").await
    };
    let slow = [
        "--max-attempts",
        "3",
        "--retry-initial-ms",
        "1000",
        "--retry-max-ms",
        "5000",
    ];
    let mut first = stage.spawn_host(&plugin("billing"), &slow);
    wait_until("two failed attempts recorded", LONG, || async {
        attempts().await == 2
    })
    .await;
    first.kill_hard();

    let second = stage.spawn_host(&plugin("billing"), &["--max-attempts", "3"]);
    wait_until("the message after the poison invoiced", LONG, || async {
        stage
            .db
            .count("SELECT count(*) FROM invoices WHERE message_id = 'after'")
            .await
            == 1
    })
    .await;
    let (counted, reason): (i32, String) = sqlx::query_as(
        "SELECT attempts, reason FROM inbox_host.dead_letters WHERE message_id = 'poison'",
    )
    .fetch_one(&stage.db.pool)
    .await
    .expect("dead letter");
    assert_eq!(counted, 3, "the two attempts before the restart counted");
    assert_eq!(attempts().await, 0, "its attempts row went with it");
    assert!(reason.starts_with("failed 3 times"), "{reason}");
    assert!(
        !second.log().contains("message failed"),
        "the restarted host retried from zero:\n{}",
        second.log()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fatal_failure_is_set_aside_after_three_attempts_by_default_and_the_next_hundred_records_follow_within_ten_seconds(
) {
    let stage = Stage::new(1).await;
    let mut records = vec![stage.record("poison", Some(0), "not json")];
    records.extend((0..100).map(|n| {
        let id = format!("after-{n}");
        let payload = serde_json::json!({ "order_id": id, "amount": n }).to_string();
        stage.record(&id, Some(0), payload)
    }));
    stage.produce(records).await;
    // The CLI's own retry defaults, not the stage's fast ones.
    let host = stage.spawn_host(
        &plugin("billing"),
        &["--retry-initial-ms", "200", "--retry-max-ms", "30000"],
    );
    wait_until("the first failed attempt recorded", LONG, || async {
        stage
            .db
            .count("SELECT count(*) FROM inbox_host.attempts")
            .await
            > 0
    })
    .await;
    let first_failure = std::time::Instant::now();
    wait_until(
        "the hundred records after the poison invoiced",
        LONG,
        || async { stage.db.count("SELECT count(*) FROM invoices").await == 100 },
    )
    .await;
    let took = first_failure.elapsed();
    eprintln!("from the first failure to 100 records past it: {took:?}");
    assert!(took <= Duration::from_secs(10), "took {took:?}");
    let (attempts, reason): (i32, String) = sqlx::query_as(
        "SELECT attempts, reason FROM inbox_host.dead_letters WHERE message_id = 'poison'",
    )
    .fetch_one(&stage.db.pool)
    .await
    .expect("the poison is a dead letter with its attempts");
    assert_eq!(attempts, 3);
    assert!(reason.starts_with("failed 3 times"), "{reason}");
    wait_until("every offset committed", LONG, || async {
        stage.committed(0).await == Some(101)
    })
    .await;
    drop(host);
}

#[tokio::test(flavor = "multi_thread")]
async fn hosts_joining_and_leaving_while_batches_are_in_flight_lose_nothing_apply_nothing_twice_and_keep_committing(
) {
    const PARTITIONS: i32 = 6;
    let stage = std::sync::Arc::new(Stage::new(PARTITIONS).await);
    // The local broker holds every rebalance round for the session timeout less
    // a second (a real broker ends the round once the members rejoined), and a
    // cooperative rebalance takes two rounds: a short session keeps its rounds
    // near a real broker's.
    let fast_rejoin = ["--kafka-opt", "session.timeout.ms=3000"];
    let mut hosts = vec![stage.spawn_host(&plugin("billing"), &fast_rejoin)];
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // A steady stream (the pace of the load, not a wait), so every partition has
    // records waiting through every change.
    let producing = tokio::spawn({
        let (stage, done) = (stage.clone(), done.clone());
        async move {
            let mut produced = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let batch = (produced..produced + 150)
                    .map(|n| stage.order(&format!("order-{n}"), n))
                    .collect();
                stage.produce(batch).await;
                produced += 150;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            produced
        }
    });
    let watch = tokio::spawn(longest_wait_without_commit(
        stage.clone(),
        PARTITIONS,
        done.clone(),
    ));
    // Join, leave cleanly, join, die hard, twice. Each change comes once the
    // group has recovered from the previous one (every partition committed again
    // since), so each is measured on its own, with batches in flight.
    let mut retired = Vec::new();
    for change in 0..6 {
        let before = stage.committed_per_partition(PARTITIONS).await;
        wait_until(
            "every partition committing since the last change",
            LONG,
            || async {
                let now = stage.committed_per_partition(PARTITIONS).await;
                now.iter().zip(&before).all(|(now, before)| now > before)
            },
        )
        .await;
        match change % 3 {
            0 => hosts.push(stage.spawn_host(&plugin("billing"), &fast_rejoin)),
            1 => {
                let mut leaving = hosts.remove(0);
                assert!(
                    leaving.stop(),
                    "a host did not exit 0 on SIGTERM:\n{}",
                    leaving.log()
                );
                retired.push(leaving);
                hosts.push(stage.spawn_host(&plugin("billing"), &fast_rejoin));
            }
            _ => {
                let mut killed = hosts.remove(0);
                killed.kill_hard();
                retired.push(killed);
            }
        }
        eprintln!(
            "change {change} at {} committed",
            stage.committed_total(PARTITIONS).await
        );
    }
    if hosts.is_empty() {
        hosts.push(stage.spawn_host(&plugin("billing"), &fast_rejoin));
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let total = producing.await.expect("producer");
    wait_until("every order invoiced and committed", LONG, || async {
        stage.db.count("SELECT count(*) FROM invoices").await >= total
            && stage.committed_total(PARTITIONS).await == total
    })
    .await;
    let longest = watch.await.expect("watch");
    eprintln!("{total} orders; longest time a partition with waiting work went without a commit: {longest:?}");
    assert!(
        longest <= Duration::from_secs(15),
        "a partition waited {longest:?} for a commit"
    );
    assert_eq!(stage.db.count("SELECT count(*) FROM invoices").await, total);
    assert_eq!(
        stage
            .db
            .count("SELECT count(DISTINCT message_id) FROM invoices")
            .await,
        total
    );
    for mut host in hosts {
        assert!(host.stop(), "{}", host.log());
    }
}

/// Polls the group's committed offsets and the partitions' high watermarks until
/// `done` is set and every partition is committed to its end; returns the
/// longest time any partition with records waiting went without its committed
/// offset moving.
async fn longest_wait_without_commit(
    stage: std::sync::Arc<Stage>,
    partitions: i32,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Duration {
    let started = std::time::Instant::now();
    let mut last_move = vec![started; partitions as usize];
    let mut last_seen = vec![0; partitions as usize];
    let mut longest = Duration::ZERO;
    loop {
        let committed = stage.committed_per_partition(partitions).await;
        let high = stage.high_watermarks(partitions).await;
        let now = std::time::Instant::now();
        let mut waiting = false;
        for p in 0..partitions as usize {
            if committed[p] != last_seen[p] {
                last_seen[p] = committed[p];
                last_move[p] = now;
            }
            if committed[p] < high[p] {
                waiting = true;
                longest = longest.max(now - last_move[p]);
            } else {
                last_move[p] = now;
            }
        }
        if (!waiting && done.load(std::sync::atomic::Ordering::SeqCst))
            || started.elapsed() > LONG * 2
        {
            return longest;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_next_generation_group_protocol_kip_848_consumes_every_record_once() {
    let stage = Stage::new(3).await;
    stage
        .produce(
            (0..100)
                .map(|n| stage.order(&format!("order-{n}"), n))
                .collect(),
        )
        .await;
    let mut host = stage.spawn_host(
        &plugin("billing"),
        &["--kafka-opt", "group.protocol=consumer"],
    );
    wait_until("every order invoiced and committed", LONG, || async {
        stage.db.count("SELECT count(*) FROM invoices").await == 100
            && stage.committed_total(3).await == 100
    })
    .await;
    assert_eq!(
        stage
            .db
            .count("SELECT count(DISTINCT message_id) FROM invoices")
            .await,
        100
    );
    assert!(host.stop(), "{}", host.log());
}
