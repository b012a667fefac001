//! The partitioned inbox through the real binary: deduplication across a
//! partition boundary (sequential and concurrent, and what
//! `--resend-window-secs 0` gives up), retention that drops whole
//! partitions and keeps every row inside its window, and the upgrade from a
//! 0.3 inbox.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use inbox_host::kafka::OutgoingRecord;
use inbox_host_tests::stage::Stage;
use inbox_host_tests::{plugin, wait_until};
use sqlx::migrate::Migrator;

const LONG: Duration = Duration::from_secs(60);
const HOUR_MS: i64 = 3_600_000;

fn now_ms() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    i64::try_from(since.as_millis()).expect("ms")
}

/// An order for billing stamped `at` (ms since the epoch).
fn order_at(stage: &Stage, id: &str, partition: i32, at: i64) -> OutgoingRecord {
    let payload = serde_json::json!({ "order_id": id, "amount": 1 }).to_string();
    OutgoingRecord {
        timestamp_ms: Some(at),
        ..stage.record(id, Some(partition), payload)
    }
}

async fn invoices(stage: &Stage, id: &str) -> i64 {
    stage
        .db
        .count(&format!(
            "SELECT count(*) FROM invoices WHERE order_id = '{id}'"
        ))
        .await
}

/// The table the group's inbox row of `id` lives in.
async fn partition_of(stage: &Stage, id: &str) -> String {
    sqlx::query_scalar(
        "SELECT tableoid::regclass::text FROM inbox_host.inbox
         WHERE consumer_group = $1 AND message_id = $2",
    )
    .bind(&stage.group)
    .bind(id)
    .fetch_one(&stage.db.pool)
    .await
    .expect("the inbox row")
}

async fn committed_to(stage: &Stage, partition: i32, offset: i64) {
    wait_until(
        &format!("offset {offset} of partition {partition} committed"),
        LONG,
        || async { stage.committed(partition).await == Some(offset) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_is_a_duplicate_whichever_side_of_a_partition_boundary_its_copies_fall() {
    let stage = Stage::new(1).await;
    // A record stamped three days ago: its hour is not prepared (the host
    // prepares two days back), so its row goes to the group's `_other` partition.
    let old = now_ms() - 3 * 24 * HOUR_MS;
    // An id sent again as a new record: 100 ms before and after the hour turned.
    let boundary = now_ms() / HOUR_MS * HOUR_MS;
    stage
        .produce(vec![
            order_at(&stage, "late", 0, old),
            order_at(&stage, "resent", 0, boundary - 100),
        ])
        .await;
    let mut host = stage.spawn_host(&plugin("billing"), &[]);
    committed_to(&stage, 0, 2).await;
    // Sent again once the first copy is committed (not in the same batch).
    stage
        .produce(vec![order_at(&stage, "resent", 0, boundary + 100)])
        .await;
    committed_to(&stage, 0, 3).await;
    assert_eq!(invoices(&stage, "late").await, 1);
    assert_eq!(invoices(&stage, "resent").await, 1, "{}", host.log());
    assert!(partition_of(&stage, "late").await.ends_with("_other"));
    assert!(host.stop(), "{}", host.log());

    // Its hour is prepared under the row: the row moves into it ...
    stage
        .db
        .execute(&format!(
            "SELECT inbox_host.inbox_prepare('{g}', to_timestamp({old} / 1000.0), to_timestamp({old} / 1000.0))",
            g = stage.group
        ))
        .await;
    let moved = partition_of(&stage, "late").await;
    assert!(!moved.ends_with("_other"), "{moved}");
    // ... and the record delivered again meets it there.
    stage.produce(vec![order_at(&stage, "late", 0, old)]).await;
    let host = stage.spawn_host(&plugin("billing"), &[]);
    committed_to(&stage, 0, 4).await;
    assert_eq!(invoices(&stage, "late").await, 1, "{}", host.log());
    assert_eq!(
        stage
            .db
            .count(&format!(
                "SELECT count(*) FROM inbox_host.inbox WHERE consumer_group = '{}'",
                stage.group
            ))
            .await,
        2
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_resend_window_an_id_sent_again_across_the_hour_is_new_and_within_it_still_a_duplicate(
) {
    let stage = Stage::new(1).await;
    let boundary = now_ms() / HOUR_MS * HOUR_MS;
    stage
        .produce(vec![
            order_at(&stage, "across", 0, boundary - 100),
            order_at(&stage, "within", 0, boundary + 100),
        ])
        .await;
    let no_window = ["--resend-window-secs", "0"];
    let host = stage.spawn_host(&plugin("billing"), &no_window);
    committed_to(&stage, 0, 2).await;
    // Each id sent again as a new record, 100 ms after the hour turned.
    stage
        .produce(vec![
            order_at(&stage, "across", 0, boundary + 100),
            order_at(&stage, "within", 0, boundary + 200),
        ])
        .await;
    committed_to(&stage, 0, 4).await;
    assert_eq!(invoices(&stage, "across").await, 2, "{}", host.log());
    assert_eq!(invoices(&stage, "within").await, 1, "{}", host.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn two_copies_claimed_at_once_on_either_side_of_a_boundary_run_the_handler_once() {
    let stage = Stage::new(2).await;
    stage
        .db
        .execute(
            "CREATE TABLE gate (id int PRIMARY KEY, hits int NOT NULL);
             INSERT INTO gate VALUES (1, 0);
             GRANT SELECT, UPDATE ON gate TO inbox_guest",
        )
        .await;
    // The operator holds the gate: whichever copy is claimed first waits in its
    // handler, its transaction open, while the other copy is claimed.
    let mut gate = stage.db.pool.begin().await.expect("begin");
    sqlx::query("SELECT * FROM gate WHERE id = 1 FOR UPDATE")
        .execute(&mut *gate)
        .await
        .expect("hold the gate");
    let boundary = now_ms() / HOUR_MS * HOUR_MS;
    let copy = |partition, at| OutgoingRecord {
        timestamp_ms: Some(at),
        ..stage.record(
            "twice",
            Some(partition),
            "UPDATE gate SET hits = hits + 1 WHERE id = 1",
        )
    };
    stage
        .produce(vec![copy(0, boundary - 50), copy(1, boundary + 50)])
        .await;
    let host = stage.spawn_host(&plugin("sql-runner"), &["--lock-timeout-ms", "20000"]);
    wait_until(
        "both copies claimed, one waiting for the other",
        LONG,
        || async {
            stage
                .db
                .count("SELECT count(*) FROM pg_locks WHERE NOT granted")
                .await
                >= 2
        },
    )
    .await;
    gate.commit().await.expect("open the gate");
    committed_to(&stage, 0, 1).await;
    committed_to(&stage, 1, 1).await;
    assert_eq!(
        stage.db.count("SELECT hits::bigint FROM gate").await,
        1,
        "{}",
        host.log()
    );
    assert_eq!(
        stage
            .db
            .count("SELECT count(*) FROM inbox_host.inbox WHERE message_id = 'twice'")
            .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn retention_drops_whole_partitions_past_the_window_and_keeps_every_row_inside_it() {
    let stage = Stage::new(1).await;
    let g = &stage.group;
    stage
        .db
        .execute(&format!(
            "SELECT inbox_host.inbox_prepare(g, now() - interval '10 days', now() - interval '6 days')
               FROM unnest(ARRAY['{g}', 'someone-else']) AS g;
             INSERT INTO inbox_host.inbox (message_id, consumer_group, worker_id, plugin_digest, topic, kafka_partition, kafka_offset, record_at)
             VALUES ('old', '{g}', 'w', 'd', 't', 0, 0, now() - interval '9 days'),
                    ('inside', '{g}', 'w', 'd', 't', 0, 1, now() - interval '7 days' + interval '2 hours'),
                    ('recent', '{g}', 'w', 'd', 't', 0, 2, now() - interval '1 day'),
                    ('other-group', 'someone-else', 'w', 'd', 't', 0, 0, now() - interval '9 days');
             INSERT INTO inbox_host.attempts (consumer_group, topic, kafka_partition, kafka_offset, attempts, last_error, last_failed_at)
             VALUES ('{g}', 't', 0, 0, 1, 'long gone', now() - interval '8 days'),
                    ('{g}', 't', 0, 1, 1, 'still failing', now());
             INSERT INTO inbox_host.dead_letters (consumer_group, topic, kafka_partition, kafka_offset, reason, headers, worker_id, recorded_at)
             VALUES ('{g}', 't', 0, 0, 'old', '[]', 'w', now() - interval '10 days'),
                    ('{g}', 't', 0, 1, 'recent', '[]', 'w', now() - interval '1 day')"
        ))
        .await;
    let old_partition: String = sqlx::query_scalar(
        "SELECT name FROM inbox_host.inbox_partitions
         WHERE consumer_group = $1 AND from_at <= now() - interval '9 days' AND to_at > now() - interval '9 days'",
    )
    .bind(g)
    .fetch_one(&stage.db.pool)
    .await
    .expect("the old row's partition");

    let host = stage.spawn_host(
        &plugin("billing"),
        &[
            "--inbox-retention-days",
            "7",
            "--dead-letter-retention-days",
            "7",
        ],
    );
    wait_until("the old partition dropped", LONG, || async {
        stage
            .db
            .count(&format!(
                "SELECT count(*) FROM pg_class WHERE relname = '{old_partition}'"
            ))
            .await
            == 0
    })
    .await;
    let kept: Vec<String> =
        sqlx::query_scalar("SELECT message_id FROM inbox_host.inbox ORDER BY message_id")
            .fetch_all(&stage.db.pool)
            .await
            .expect("rows");
    assert_eq!(kept, ["inside", "other-group", "recent"]);
    let past_window = format!(
        "SELECT count(*) FROM inbox_host.inbox_partitions
         WHERE consumer_group = '{g}' AND to_at <= now() - interval '7 days'"
    );
    assert_eq!(stage.db.count(&past_window).await, 0);
    wait_until("old attempts and dead letters deleted", LONG, || async {
        stage
            .db
            .count("SELECT count(*) FROM inbox_host.dead_letters")
            .await
            == 1
    })
    .await;
    let errors: Vec<String> = sqlx::query_scalar("SELECT last_error FROM inbox_host.attempts")
        .fetch_all(&stage.db.pool)
        .await
        .expect("attempts");
    assert_eq!(errors, ["still failing"]);
    // The local broker (librdkafka's mock cluster) does not answer DescribeConfigs,
    // so the host must say it could not check, never stay silent; the comparison
    // itself is unit-tested in app::retention.
    wait_until("the host says it could not check the window", LONG, || async {
        host.log()
            .contains("could not read the topic's retention.ms; make sure --inbox-retention-days outlives it")
    })
    .await;
}

/// The host's migrations up to 0.3 (before the partitioned inbox).
async fn migrations_of_0_3() -> (Migrator, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let all = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
    for entry in std::fs::read_dir(&all).expect("migrations") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with(".sql") && name < "20261205" {
            std::fs::copy(&path, dir.path().join(name)).expect("copy");
        }
    }
    (Migrator::new(dir.path()).await.expect("0.3 migrator"), dir)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_inbox_of_0_3_keeps_deduplicating_after_the_upgrade_until_its_rows_age_out() {
    let stage = Stage::new(1).await;
    let g = &stage.group;
    // The database as a 0.3 host left it, with a message it handled.
    stage.db.execute("DROP SCHEMA inbox_host CASCADE").await;
    let (of_0_3, _dir) = migrations_of_0_3().await;
    let mut conn = stage.db.pool.acquire().await.expect("connection");
    sqlx::raw_sql("CREATE SCHEMA inbox_host; SET search_path TO inbox_host")
        .execute(&mut *conn)
        .await
        .expect("schema");
    of_0_3.run(&mut *conn).await.expect("0.3 migrations");
    sqlx::raw_sql("RESET search_path")
        .execute(&mut *conn)
        .await
        .expect("reset");
    drop(conn);
    stage
        .db
        .execute(&format!(
            "INSERT INTO inbox_host.inbox (message_id, consumer_group, worker_id, plugin_digest, topic, kafka_partition, kafka_offset, received_at)
             VALUES ('handled-by-0.3', '{g}', 'w', 'd', 't', 0, 0, now() - interval '1 day'),
                    ('aged-out', '{g}', 'w', 'd', 't', 0, 1, now() - interval '10 days')"
        ))
        .await;

    // The upgraded host migrates at start; the old message comes again.
    stage
        .produce(vec![
            stage.order("handled-by-0.3", 1),
            stage.order("new-after-upgrade", 1),
        ])
        .await;
    let host = stage.spawn_host(&plugin("billing"), &["--inbox-retention-days", "7"]);
    committed_to(&stage, 0, 2).await;
    assert_eq!(
        invoices(&stage, "handled-by-0.3").await,
        0,
        "{}",
        host.log()
    );
    assert_eq!(invoices(&stage, "new-after-upgrade").await, 1);
    let kept: Vec<String> =
        sqlx::query_scalar("SELECT message_id FROM inbox_host.inbox_before_0_4")
            .fetch_all(&stage.db.pool)
            .await
            .expect("rows of 0.3");
    assert_eq!(
        kept,
        ["handled-by-0.3"],
        "retention removed the aged-out row only"
    );
    assert_eq!(
        stage
            .db
            .count(&format!(
                "SELECT count(*) FROM inbox_host.inbox WHERE consumer_group = '{g}'"
            ))
            .await,
        1
    );
}
