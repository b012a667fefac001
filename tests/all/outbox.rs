//! The outbox end to end: what a handler publishes reaches its topic only when
//! its transaction commits, with a `message_id` derived from its cause; refused
//! publications set the record aside; the relay sends what applications insert,
//! also rows that commit out of id order, and again after a crash with the same
//! ids.

use std::time::Duration;

use inbox_host::inbox::outgoing_message_id;
use inbox_host::kafka;
use inbox_host_tests::host::{self, Host};
use inbox_host_tests::stage::{ReadRecord, Stage};
use inbox_host_tests::{plugin, wait_until};

const LONG: Duration = Duration::from_secs(120);
pub const OUT: &str = "invoices-created";

/// Records in partition 0 of `topic` so far.
pub async fn topic_len(stage: &Stage, topic: &str) -> i64 {
    let (brokers, topic) = (stage.broker.bootstrap().to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || kafka::high_watermarks(&brokers, &topic, 1))
        .await
        .expect("task")
        .map(|w| w[0])
        .unwrap_or(0)
}

/// Waits until `topic` holds `n` records, then reads them.
async fn read_when(stage: &Stage, topic: &str, n: i64) -> Vec<ReadRecord> {
    wait_until(&format!("{n} record(s) on {topic}"), LONG, || async {
        topic_len(stage, topic).await >= n
    })
    .await;
    stage.read_partition(topic).await
}

/// Rows in `inbox_host.outbox` now.
pub async fn outbox_rows(stage: &Stage) -> i64 {
    stage
        .db
        .count("SELECT count(*) FROM inbox_host.outbox")
        .await
}

/// Waits until the relay has sent every row.
pub async fn outbox_emptied(stage: &Stage) {
    wait_until("the outbox emptied", LONG, || async {
        outbox_rows(stage).await == 0
    })
    .await;
}

pub async fn stage_with_output() -> Stage {
    let stage = Stage::new(1).await;
    stage
        .broker
        .create_topic(OUT, 1)
        .await
        .expect("output topic");
    stage
}

/// Runs billing-publish with `extra` flags over one record `id` with
/// `payload`, waits until the record is set aside, and checks that it was
/// for a publish rule with nothing invoiced or published; returns the reason.
async fn refused_publication(id: &str, payload: &str, extra: &[&str]) -> String {
    let stage = stage_with_output().await;
    stage
        .produce(vec![stage.record(id, Some(0), payload)])
        .await;
    let _host = spawn_publisher(&stage, extra);
    wait_until("the record set aside", LONG, || async {
        stage.committed(0).await == Some(1)
    })
    .await;
    let (kind, reason): (String, String) = sqlx::query_as(
        "SELECT failure_kind, reason FROM inbox_host.dead_letters WHERE message_id = $1",
    )
    .bind(id)
    .fetch_one(&stage.db.pool)
    .await
    .expect("a dead letter");
    assert_eq!(kind, "publish-rule", "{reason}");
    assert_eq!(stage.db.count("SELECT count(*) FROM invoices").await, 0);
    assert_eq!(outbox_rows(&stage).await, 0);
    assert_eq!(topic_len(&stage, OUT).await, 0);
    reason
}

fn spawn_publisher(stage: &Stage, extra: &[&str]) -> Host {
    let mut args = vec!["--publish-topic", OUT];
    args.extend_from_slice(extra);
    stage.spawn_host(&plugin("billing-publish"), &args)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_published_message_arrives_after_commit_with_a_derived_id_its_cause_and_trace() {
    let stage = stage_with_output().await;
    let mut order = stage.order("o-1", 12);
    let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    order
        .headers
        .push(("traceparent".into(), trace.as_bytes().to_vec()));
    stage.produce(vec![order]).await;
    let _host = spawn_publisher(&stage, &[]);

    let published = read_when(&stage, OUT, 1).await;
    assert_eq!(published.len(), 1, "{published:?}");
    let message = &published[0];
    assert_eq!(message.key.as_deref(), Some(&b"o-1"[..]));
    assert_eq!(
        message.header("message_id"),
        Some(outgoing_message_id(&stage.group, "o-1", 0)),
        "the id is derived from the group, the cause and the position"
    );
    assert_eq!(message.header("inbox-caused-by").as_deref(), Some("o-1"));
    assert_eq!(message.header("traceparent").as_deref(), Some(trace));
    assert_eq!(
        message.header("event-type").as_deref(),
        Some("invoice-created")
    );
    let body: serde_json::Value = serde_json::from_slice(&message.payload).expect("json");
    assert_eq!(body["order_id"], "o-1");
    assert_eq!(
        stage.db.count("SELECT count(*) FROM invoices").await,
        1,
        "the effect committed with the message"
    );
    outbox_emptied(&stage).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_that_fails_or_traps_after_publishing_publishes_nothing() {
    let stage = stage_with_output().await;
    let failing = stage.record(
        "o-fails",
        Some(0),
        r#"{"order_id": "o-fails", "amount": 1, "fail_after_publish": true}"#,
    );
    let trapping = stage.record(
        "o-traps",
        Some(0),
        r#"{"order_id": "o-traps", "amount": 1, "trap_after_publish": true}"#,
    );
    stage
        .produce(vec![
            failing,
            trapping,
            stage.record("o-next", Some(0), r#"{"order_id": "o-next", "amount": 2}"#),
        ])
        .await;
    let _host = spawn_publisher(&stage, &["--max-attempts", "2"]);

    // The record after them is handled only once both are set aside.
    let published = read_when(&stage, OUT, 1).await;
    wait_until("all three records done", LONG, || async {
        stage.committed(0).await == Some(3)
    })
    .await;
    let published_now = stage.read_partition(OUT).await;
    assert_eq!(published_now.len(), 1, "{published_now:?}");
    assert_eq!(
        published[0].header("inbox-caused-by").as_deref(),
        Some("o-next"),
        "only the record that committed published"
    );
    assert_eq!(
        stage
            .db
            .count("SELECT count(*) FROM invoices WHERE order_id IN ('o-fails', 'o-traps')")
            .await,
        0
    );
    assert_eq!(
        stage
            .db
            .count("SELECT count(*) FROM inbox_host.dead_letters WHERE message_id IN ('o-fails', 'o-traps')")
            .await,
        2
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_topic_outside_the_allow_list_sets_the_record_aside_naming_the_flag() {
    let reason = refused_publication(
        "o-elsewhere",
        r#"{"order_id": "o-elsewhere", "amount": 1, "publish_to": "payments"}"#,
        &[],
    )
    .await;
    assert!(
        reason.contains("--publish-topic payments"),
        "the reason names the flag: {reason}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn more_messages_than_max_publish_set_the_record_aside() {
    let reason = refused_publication(
        "o-many",
        r#"{"order_id": "o-many", "amount": 1, "copies": 3}"#,
        &["--max-publish", "2"],
    )
    .await;
    assert!(reason.contains("--max-publish"), "{reason}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_over_max_message_bytes_sets_the_record_aside_naming_the_flag() {
    // The record itself (52 bytes) is under the bound; the message it causes
    // (its value, key and header together, 139 bytes) is not.
    let reason = refused_publication(
        "o-big-order-with-a-long-id",
        r#"{"order_id": "o-big-order-with-a-long-id", "amount": 1}"#,
        &["--max-message-bytes", "100"],
    )
    .await;
    assert!(reason.contains("--max-message-bytes (100)"), "{reason}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_relay_killed_after_the_ack_and_before_the_delete_sends_again_with_the_same_ids() {
    let stage = stage_with_output().await;
    stage
        .produce((0..5).map(|i| stage.order(&format!("o-{i}"), i)).collect())
        .await;
    // Committed, not yet sent: the host that wrote them is killed.
    let mut writer = spawn_publisher(&stage, &["--no-relay"]);
    wait_until("five rows in the outbox", LONG, || async {
        outbox_rows(&stage).await == 5
    })
    .await;
    writer.kill_hard();
    assert_eq!(topic_len(&stage, OUT).await, 0);

    // A relay that dies after the broker's ack, before deleting the rows.
    let mut crashing = stage.spawn_host_with_env(
        &plugin("billing-publish"),
        &["--publish-topic", OUT],
        &[("INBOX_HOST_FAILPOINT_RELAY_ABORT", "1")],
    );
    let since = std::time::Instant::now();
    while crashing.is_running() {
        assert!(
            since.elapsed() < LONG,
            "the relay did not reach its failpoint"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        outbox_rows(&stage).await,
        5,
        "nothing deleted before the crash"
    );

    let _host = spawn_publisher(&stage, &[]);
    outbox_emptied(&stage).await;
    let published = read_when(&stage, OUT, 10).await;
    let ids: Vec<String> = published
        .iter()
        .map(|r| r.header("message_id").expect("an id"))
        .collect();
    let expected: Vec<String> = (0..5)
        .map(|i| outgoing_message_id(&stage.group, &format!("o-{i}"), 0))
        .collect();
    assert_eq!(&ids[..5], &expected[..], "sent in the order written");
    assert_eq!(&ids[5..], &expected[..], "sent again with the same ids");
}

/// An application's own outbox insert, as docs/outbox.md shows it.
const APP_INSERT: &str = "INSERT INTO inbox_host.outbox (topic, message_key, payload, headers)
     VALUES ('invoices-created', 'acct-1', convert_to('{\"n\": 1}', 'UTF8'), '[[\"source\", \"app\"]]')";

#[tokio::test(flavor = "multi_thread")]
async fn the_relay_command_sends_rows_an_application_inserted_even_those_committing_out_of_id_order(
) {
    let stage = stage_with_output().await;
    let migrated = host::run(&["migrate"], &[("DATABASE_URL", &stage.db.url)]);
    assert!(migrated.status.success(), "{migrated:?}");
    let _relay = Host::spawn(
        &["relay"],
        &[
            ("DATABASE_URL", &stage.db.url),
            ("KAFKA_BROKERS", stage.broker.bootstrap()),
        ],
    );
    stage.db.execute(APP_INSERT).await;
    let first = read_when(&stage, OUT, 1).await;
    assert_eq!(first[0].key.as_deref(), Some(&b"acct-1"[..]));
    assert_eq!(first[0].payload, br#"{"n": 1}"#);
    assert_eq!(first[0].header("source").as_deref(), Some("app"));
    let id: Option<String> = first[0].header("message_id");
    assert_eq!(id.map(|i| i.len()), Some(36), "a generated UUID");

    // A transaction takes an id first and commits last: a relay that kept "the
    // highest id sent" would skip it.
    let mut early = stage.db.pool.begin().await.expect("begin");
    sqlx::query(&APP_INSERT.replace("acct-1", "early"))
        .execute(&mut *early)
        .await
        .expect("insert");
    stage
        .db
        .execute(&APP_INSERT.replace("acct-1", "late"))
        .await;
    let second = read_when(&stage, OUT, 2).await;
    assert_eq!(second[1].key.as_deref(), Some(&b"late"[..]));
    early.commit().await.expect("commit");
    let third = read_when(&stage, OUT, 3).await;
    assert_eq!(third[2].key.as_deref(), Some(&b"early"[..]));
    outbox_emptied(&stage).await;

    // Headers the relay could not send as given are refused at insert, not
    // dropped at send.
    for headers in [
        r#"[["lonely"]]"#,
        r#"[["n", 1]]"#,
        r#"[["message_id", "x"]]"#,
    ] {
        let refused = sqlx::query(
            "INSERT INTO inbox_host.outbox (topic, payload, headers) VALUES ('t', 'v', $1::jsonb)",
        )
        .bind(headers)
        .execute(&stage.db.pool)
        .await
        .expect_err(headers);
        assert!(
            refused
                .to_string()
                .contains("outbox_headers_are_name_value_pairs"),
            "{headers}: {refused}"
        );
    }
}
