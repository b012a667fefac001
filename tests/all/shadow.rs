//! `inbox-host shadow`: a new version tried on live records, compared with the
//! live version, with nothing written and no offset committed.

use std::time::Duration;

use inbox_host_tests::receiver::Receiver;
use inbox_host_tests::stage::Stage;
use inbox_host_tests::{billing_v2, host, plugin, wait_until};

const LONG: Duration = Duration::from_secs(120);

/// A fingerprint of everything a shadow run must leave as it was.
async fn state_of(stage: &Stage) -> Vec<String> {
    let mut state = Vec::new();
    for table in [
        "invoices",
        "inbox_host.inbox",
        "inbox_host.attempts",
        "inbox_host.dead_letters",
    ] {
        let fingerprint: Option<String> = sqlx::query_scalar(&format!(
            "SELECT md5(string_agg(t::text, '|' ORDER BY t::text)) FROM {table} t"
        ))
        .fetch_one(&stage.db.pool)
        .await
        .expect("fingerprint");
        state.push(format!("{table}: {fingerprint:?}"));
    }
    state
}

#[tokio::test(flavor = "multi_thread")]
async fn a_version_failing_half_the_records_is_reported_exactly_and_nothing_is_written() {
    let stage = Stage::new(1).await;
    let mut records: Vec<_> = (0..10)
        .map(|n| stage.order(&format!("order-{n}"), n))
        .collect();
    records.push(stage.record("poison", Some(0), "not json"));
    stage.produce(records).await;
    let live = stage.spawn_host(&plugin("billing"), &[]);
    wait_until("the live version done with all eleven", LONG, || async {
        stage.committed(0).await == Some(11)
    })
    .await;
    drop(live);
    // What only v2 would trip over: it writes its marker, and odd amounts
    // with that marker are now refused.
    stage
        .db
        .execute(
            "ALTER TABLE invoices ADD CONSTRAINT v2_even_only
               CHECK (marker IS DISTINCT FROM 'billing-v2' OR amount % 2 = 0)",
        )
        .await;
    let before = state_of(&stage).await;

    let out = host::run(
        &[
            "shadow",
            "--plugin",
            billing_v2().to_str().expect("path"),
            "--group",
            &stage.group,
            "--examples",
            "10",
            "--json",
        ],
        &[
            ("DATABASE_URL", stage.db.url.as_str()),
            ("KAFKA_BROKERS", stage.broker.bootstrap()),
            ("INBOX_TOPIC", stage.topic.as_str()),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "v2 fails records v1 processed: {stderr}"
    );
    assert!(
        stderr.contains("5 record(s) the live version processed fail"),
        "{stderr}"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["records"], 11, "{report}");
    assert_eq!(report["regressions"], 5, "{report}");
    let count = |outcome: &str, live: &str| {
        report["summary"]
            .as_array()
            .expect("summary")
            .iter()
            .find(|row| row["outcome"] == outcome && row["live"] == live)
            .map_or(0, |row| row["count"].as_u64().expect("count"))
    };
    assert_eq!(count("processed", "processed"), 5);
    assert_eq!(count("failed handler-error", "processed"), 5);
    assert_eq!(
        count("failed handler-error", "set_aside"),
        1,
        "the poison, as before"
    );
    let mut regressed: Vec<&str> = report["examples"]
        .as_array()
        .expect("examples")
        .iter()
        .filter(|e| e["live"] == "processed")
        .map(|e| e["message_id"].as_str().expect("id"))
        .collect();
    regressed.sort_unstable();
    assert_eq!(
        regressed,
        ["order-1", "order-3", "order-5", "order-7", "order-9"]
    );

    assert_eq!(
        state_of(&stage).await,
        before,
        "the shadow run left something behind"
    );
    assert_eq!(
        stage.committed(0).await,
        Some(11),
        "the live group's offsets moved"
    );

    // The same records against v1 itself: nothing regresses, exit 0, a table.
    let same = host::run(
        &[
            "shadow",
            "--plugin",
            plugin("billing").to_str().expect("path"),
            "--group",
            &stage.group,
        ],
        &[
            ("DATABASE_URL", stage.db.url.as_str()),
            ("KAFKA_BROKERS", stage.broker.bootstrap()),
            ("INBOX_TOPIC", stage.topic.as_str()),
        ],
    );
    let table = String::from_utf8_lossy(&same.stdout);
    assert!(
        same.status.success(),
        "{table}{}",
        String::from_utf8_lossy(&same.stderr)
    );
    assert!(table.contains("11 record(s), all rolled back"), "{table}");
    assert_eq!(state_of(&stage).await, before);
}

#[tokio::test(flavor = "multi_thread")]
async fn what_a_version_would_publish_is_compared_with_what_the_live_version_published() {
    const OUT: &str = "invoices-created";
    let stage = Stage::new(1).await;
    stage
        .broker
        .create_topic(OUT, 2)
        .await
        .expect("output topic");
    stage
        .produce(
            (0..6)
                .map(|n| stage.order(&format!("order-{n}"), n))
                .collect(),
        )
        .await;
    let live = stage.spawn_host(&plugin("billing-publish"), &["--publish-topic", OUT]);
    wait_until("the live version done and relayed", LONG, || async {
        stage.committed(0).await == Some(6)
            && stage
                .db
                .count("SELECT count(*) FROM inbox_host.outbox")
                .await
                == 0
    })
    .await;
    drop(live);
    let shadow = |version: &str| {
        let version = plugin(version);
        host::run(
            &[
                "shadow",
                "--plugin",
                version.to_str().expect("path"),
                "--group",
                &stage.group,
                "--publish-topic",
                OUT,
                "--examples",
                "2",
            ],
            &[
                ("DATABASE_URL", stage.db.url.as_str()),
                ("KAFKA_BROKERS", stage.broker.bootstrap()),
                ("INBOX_TOPIC", stage.topic.as_str()),
            ],
        )
    };

    let same = shadow("billing-publish");
    let (said, logged) = (
        String::from_utf8_lossy(&same.stdout),
        String::from_utf8_lossy(&same.stderr),
    );
    assert!(same.status.success(), "{said}{logged}");
    assert!(
        said.contains(&format!(
            "publications against the live version's (read back from the last 10000 of each partition of {OUT}): 6 record(s) the same, 0 differ"
        )),
        "{said}{logged}"
    );

    // billing writes the same invoice and publishes nothing.
    let silent = shadow("billing");
    let said = String::from_utf8_lossy(&silent.stdout);
    assert!(
        said.contains("0 record(s) the same, 6 differ"),
        "{said}{}",
        String::from_utf8_lossy(&silent.stderr)
    );
    assert!(
        said.contains("order-0: publishes 0 message(s), the live version published 1"),
        "{said}"
    );
    assert_eq!(
        stage
            .db
            .count("SELECT count(*) FROM inbox_host.outbox")
            .await,
        0,
        "a shadow run never stages a message"
    );
}

/// Nothing leaves a shadow run: a version's requests after commit are counted
/// per origin under the live host's `--http-allow` rules, and records whose
/// handler calls out are reported as not compared, never as regressions.
#[tokio::test(flavor = "multi_thread")]
async fn a_shadow_counts_requests_per_origin_and_sends_neither_requests_nor_calls() {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    let orders = (0..3)
        .map(|n| {
            let id = format!("order-{n}");
            let knobs = serde_json::json!({ "charge_url": format!("{}/charges", receiver.origin) });
            receiver.order(&stage, "notify_url", &id, "/notify", knobs)
        })
        .collect();
    stage.produce(orders).await;
    let allow = ["--http-allow", receiver.origin.as_str()];
    let live = stage.spawn_host(&plugin("notify"), &allow);
    wait_until(
        "the live version done and its requests sent",
        LONG,
        || async { stage.committed(0).await == Some(3) && receiver.applied() == 3 },
    )
    .await;
    drop(live);
    let shadow = |version: &str| {
        let version = plugin(version);
        let path = version.to_str().expect("path");
        let args = [
            "shadow",
            "--plugin",
            path,
            "--group",
            &stage.group,
            allow[0],
            allow[1],
        ];
        let out = host::run(
            &args,
            &[
                ("DATABASE_URL", stage.db.url.as_str()),
                ("KAFKA_BROKERS", stage.broker.bootstrap()),
                ("INBOX_TOPIC", stage.topic.as_str()),
            ],
        );
        let stderr = host::strip_ansi(&String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{stderr}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    let said = shadow("notify");
    assert!(
        said.contains(&format!(
            "would request after commit (not sent): 3 to {}",
            receiver.origin
        )),
        "{said}"
    );
    let said = shadow("charge");
    assert!(
        said.contains(
            "3 record(s) not compared: the handler calls out (a call in the handler), which a shadow run does not send"
        ),
        "{said}"
    );
    assert_eq!(
        receiver.arrivals().len(),
        3,
        "only the live version's requests arrived"
    );
}
