//! Dead letters end to end: published to a dead-letter topic with their
//! original headers and diagnostic ones, listed, shown and redriven with the
//! CLI after the cause is fixed, handled exactly once.

use std::time::Duration;

use inbox_host_tests::host;
use inbox_host_tests::stage::Stage;
use inbox_host_tests::{plugin, unique, wait_until};

const LONG: Duration = Duration::from_secs(120);

/// A statement that fails (division by zero) until `gate` has a row.
const GATED: &str = "INSERT INTO effects (n) VALUES (1 / (SELECT count(*)::int FROM gate))";

#[tokio::test(flavor = "multi_thread")]
async fn a_fatal_record_is_published_with_its_headers_listed_shown_and_redriven_exactly_once() {
    let stage = Stage::new(1).await;
    stage
        .db
        .execute(
            "CREATE TABLE gate (open int); CREATE TABLE effects (n int);
             GRANT SELECT ON gate TO inbox_guest; GRANT INSERT ON effects TO inbox_guest",
        )
        .await;
    let dlt = unique("orders-dlt");
    stage
        .broker
        .create_topic(&dlt, 1)
        .await
        .expect("dead-letter topic");
    let mut letter = stage.record("letter", Some(0), GATED);
    letter.headers.push(("origin".into(), b"checkout".to_vec()));
    let placed = stage
        .produce(vec![
            stage.record("before", Some(0), "SELECT 1"),
            letter,
            stage.record("after", Some(0), "SELECT 1"),
        ])
        .await;
    let host = stage.spawn_host(&plugin("sql-runner"), &["--dead-letter-topic", &dlt]);
    wait_until("all three records done", LONG, || async {
        stage.committed(0).await == Some(3)
    })
    .await;

    // On the dead-letter topic: the record as it was, plus where it came from and why.
    let published = stage.read_partition(&dlt).await;
    assert_eq!(published.len(), 1, "{published:?}");
    let dead = &published[0];
    assert_eq!(dead.key.as_deref(), Some(&b"letter"[..]));
    assert_eq!(dead.payload, GATED.as_bytes());
    assert_eq!(
        &dead.headers[..2],
        &[
            ("message_id".to_string(), Some(b"letter".to_vec())),
            ("origin".to_string(), Some(b"checkout".to_vec())),
        ],
        "the original headers first, intact"
    );
    let digest =
        inbox_host::plugin::digest_of(&std::fs::read(plugin("sql-runner")).expect("plugin"));
    for (key, value) in [
        ("kafka_dlt-original-topic", stage.topic.clone()),
        ("kafka_dlt-original-partition", "0".into()),
        ("kafka_dlt-original-offset", placed[1].1.to_string()),
        ("kafka_dlt-original-consumer-group", stage.group.clone()),
        ("kafka_dlt-exception-fqcn", "handler-error".into()),
        ("inbox_host-attempts", "3".into()),
        ("inbox_host-plugin-digest", digest),
        ("inbox_host-message-id", "letter".into()),
    ] {
        assert_eq!(dead.header(key), Some(value), "{key} in {:?}", dead.headers);
    }
    let reason = dead.header("kafka_dlt-exception-message").expect("reason");
    assert!(
        reason.contains("failed 3 times") && reason.contains("22012"),
        "{reason}"
    );
    let produced_at: i64 = dead
        .header("kafka_dlt-original-timestamp")
        .and_then(|t| t.parse().ok())
        .expect("the original timestamp in ms");
    assert!(produced_at > 1_700_000_000_000, "{produced_at}");

    let cli = |args: &[&str]| {
        host::run(
            &[&["dead-letters"], args].concat(),
            &[
                ("DATABASE_URL", stage.db.url.as_str()),
                ("KAFKA_BROKERS", stage.broker.bootstrap()),
            ],
        )
    };
    let json = |out: &std::process::Output| -> serde_json::Value {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let listed = json(&cli(&["list", "--json", "--group", &stage.group]));
    assert_eq!(listed["total"], 1, "{listed}");
    let row = &listed["letters"][0];
    assert_eq!(
        (&row["message_id"], &row["failure_kind"], &row["attempts"]),
        (&"letter".into(), &"handler-error".into(), &3.into())
    );
    let id = row["id"].as_i64().expect("id").to_string();
    for (filter, matches) in [
        (&["--reason", "DIVISION BY ZERO", "--since", "1h"][..], 1),
        (&["--reason", "no such reason"][..], 0),
        (&["--topic", "another-topic"][..], 0),
    ] {
        let listed = json(&cli(&[&["list", "--json"], filter].concat()));
        assert_eq!(listed["total"], matches, "{filter:?}: {listed}");
    }
    let shown = json(&cli(&["show", &id, "--json"]));
    assert_eq!(shown["payload"]["text"], GATED);
    assert_eq!(shown["headers"][1]["key"], "origin");
    assert_eq!(shown["headers"][1]["value"]["text"], "checkout");
    let table = cli(&["list"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("letter") && table.contains("1 of 1 dead letter"),
        "{table}"
    );

    // The fix, then the redrive: handled once, the letter marked.
    stage.db.execute("INSERT INTO gate VALUES (1)").await;
    let redriven = cli(&["redrive", &id, "--by", "ops@test"]);
    assert!(
        redriven.status.success(),
        "{}",
        String::from_utf8_lossy(&redriven.stderr)
    );
    wait_until("the redriven record handled", LONG, || async {
        stage.committed(0).await == Some(4)
    })
    .await;
    assert_eq!(stage.db.count("SELECT count(*) FROM effects").await, 1);
    let marked = stage
        .db
        .count(&format!(
            "SELECT count(*) FROM inbox_host.dead_letters
              WHERE id = {id} AND redrives = 1 AND redriven_by = 'ops@test'
                AND redriven_to = '{}' AND redriven_at IS NOT NULL",
            stage.topic
        ))
        .await;
    assert_eq!(marked, 1);
    assert_eq!(
        json(&cli(&["list", "--json"]))["total"],
        0,
        "redriven letters are not listed"
    );
    assert_eq!(
        json(&cli(&["list", "--json", "--include-redriven"]))["total"],
        1
    );

    // Twice is refused; --again republishes, and the inbox keeps it to one effect.
    let twice = cli(&["redrive", &id]);
    let stderr = String::from_utf8_lossy(&twice.stderr);
    assert!(!twice.status.success(), "{stderr}");
    assert!(
        stderr.contains("already redriven") && stderr.contains("--again"),
        "{stderr}"
    );
    let again = cli(&["redrive", &id, "--again"]);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    wait_until("the second redrive consumed", LONG, || async {
        stage.committed(0).await == Some(5)
    })
    .await;
    assert_eq!(stage.db.count("SELECT count(*) FROM effects").await, 1);
    assert_eq!(
        stage
            .db
            .count("SELECT count(*) FROM inbox_host.inbox WHERE message_id = 'letter'")
            .await,
        1
    );
    drop(host);
}

/// The dead-letter topic is written before the letter's offset is stored:
/// while the topic cannot take the record, its partition stays on it.
#[tokio::test(flavor = "multi_thread")]
async fn a_letter_offset_is_stored_only_after_the_dead_letter_topic_took_it() {
    let stage = Stage::new(2).await;
    let dlt = unique("orders-dlt");
    stage
        .broker
        .create_topic(&dlt, 1)
        .await
        .expect("dead-letter topic");
    stage
        .broker
        .set_topic_available(&dlt, false)
        .expect("dead-letter topic unavailable");
    stage
        .produce(vec![
            stage.record("before", Some(0), "SELECT 1"),
            stage.record("letter", Some(0), "SELECT 1 / 0"),
            stage.record("after", Some(0), "SELECT 1"),
            stage.record("elsewhere-1", Some(1), "SELECT 1"),
        ])
        .await;
    let host = stage.spawn_host(&plugin("sql-runner"), &["--dead-letter-topic", &dlt]);
    let letters = "SELECT count(*) FROM inbox_host.dead_letters WHERE message_id = 'letter'";
    wait_until("the letter recorded in the table", LONG, || async {
        stage.db.count(letters).await == 1
    })
    .await;
    // A commit after that moment, seen on the other partition.
    stage
        .produce(vec![stage.record("elsewhere-2", Some(1), "SELECT 1")])
        .await;
    wait_until("the other partition committed", LONG, || async {
        stage.committed(1).await == Some(2)
    })
    .await;
    assert_eq!(
        stage.committed(0).await,
        Some(1),
        "nothing past the letter is stored while its topic is unavailable"
    );
    let after = "SELECT count(*) FROM inbox_host.inbox WHERE message_id = 'after'";
    assert_eq!(stage.db.count(after).await, 0, "the partition waits");

    stage
        .broker
        .set_topic_available(&dlt, true)
        .expect("dead-letter topic back");
    wait_until("the partition moved on", LONG, || async {
        stage.committed(0).await == Some(3)
    })
    .await;
    let published = stage.read_partition(&dlt).await;
    assert_eq!(published.len(), 1, "published once: {published:?}");
    assert_eq!(published[0].key.as_deref(), Some(&b"letter"[..]));
    assert_eq!(
        stage.db.count(letters).await,
        1,
        "one row, however many tries"
    );
    assert_eq!(stage.db.count(after).await, 1);
    drop(host);
}

#[test]
fn redrive_needs_ids_or_all_and_filters_only_with_all() {
    for (args, expected) in [
        (&["redrive"][..], "name the letters to redrive"),
        (
            &["redrive", "1", "--reason", "x"][..],
            "select letters for --all",
        ),
        (&["list", "--since", "yesterday"][..], "--since yesterday"),
    ] {
        host::refuses(&[&["dead-letters"], args].concat(), expected);
    }
}
