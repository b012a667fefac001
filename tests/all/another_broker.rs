//! What only a broker other than librdkafka's mock cluster can show: SASL end
//! to end, and the coordinator's own list of the group's members
//! (DescribeGroups). Ignored in the ordinary run; `scripts/compat` starts the
//! brokers (tansu) and runs them.

use std::time::{Duration, Instant};

use inbox_host::kafka::{self, OutgoingRecord};
use inbox_host_tests::broker::{create_topic_with, SaslBroker};
use inbox_host_tests::host::Host;
use inbox_host_tests::stage::Stage;
use inbox_host_tests::{plugin, unique, wait_until, TestDb};

const LONG: Duration = Duration::from_secs(120);

/// Orders consumed through a SASL login with `mechanism`: every one invoiced.
async fn billing_over_sasl(mechanism: &str) {
    const ORDERS: i64 = 200;
    let broker = SaslBroker::from_env();
    let login = broker.login(mechanism, &broker.password);
    let db = TestDb::start().await;
    let topic = unique("orders");
    create_topic_with(&broker.bootstrap, &login, &topic, 2)
        .await
        .expect("topic, created over SASL");
    let records: Vec<OutgoingRecord> = (0..ORDERS)
        .map(|n| {
            let id = format!("order-{n}");
            OutgoingRecord {
                topic: topic.clone(),
                key: Some(id.clone().into_bytes()),
                headers: vec![("message_id".into(), id.clone().into_bytes())],
                payload: serde_json::json!({ "order_id": id, "amount": n })
                    .to_string()
                    .into_bytes(),
                ..OutgoingRecord::default()
            }
        })
        .collect();
    kafka::produce_with(&broker.bootstrap, &login, &records)
        .await
        .expect("produced over SASL");
    let host = spawn_with_login(&broker, &db, &topic, &login, &[]);
    wait_until("every order invoiced", LONG, || async {
        db.count("SELECT count(*) FROM invoices").await == ORDERS
    })
    .await;
    assert_eq!(
        db.count("SELECT count(*) FROM inbox_host.inbox").await,
        ORDERS,
        "{}",
        host.log()
    );
}

fn spawn_with_login(
    broker: &SaslBroker,
    db: &TestDb,
    topic: &str,
    login: &[(String, String)],
    extra: &[&str],
) -> Host {
    let billing = plugin("billing");
    let group = unique("billing");
    let options: Vec<String> = login.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut args = vec![
        "--plugin",
        billing.to_str().expect("utf-8"),
        "--group",
        &group,
        "--status-addr",
        "127.0.0.1:0",
    ];
    for option in &options {
        args.extend(["--kafka-opt", option]);
    }
    args.extend_from_slice(extra);
    Host::spawn(
        &args,
        &[
            ("KAFKA_BROKERS", &broker.bootstrap),
            ("INBOX_TOPIC", topic),
            ("DATABASE_URL", &db.url),
        ],
    )
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a broker with SASL: scripts/compat"]
async fn billing_consumes_through_a_scram_sha_256_login() {
    billing_over_sasl("SCRAM-SHA-256").await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a broker with SASL: scripts/compat"]
async fn billing_consumes_through_a_scram_sha_512_login() {
    billing_over_sasl("SCRAM-SHA-512").await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a broker with SASL: scripts/compat"]
async fn a_wrong_password_stops_the_host_within_the_connect_timeout_naming_the_mechanism_and_user()
{
    let broker = SaslBroker::from_env();
    let db = TestDb::start().await;
    let wrong = format!("not-{}", broker.password);
    let login = broker.login("SCRAM-SHA-256", &wrong);
    let mut host = spawn_with_login(&broker, &db, "orders", &login, &["--connect-timeout", "5"]);
    // Timed from the moment the host turns to the brokers (plugin compiled,
    // database reached) to its exit.
    let started = Instant::now();
    let mut turned_to_brokers = None;
    let status = loop {
        if turned_to_brokers.is_none() && host.log().contains("joining the consumer group") {
            turned_to_brokers = Some(Instant::now());
        }
        if let Some(status) = host.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            started.elapsed() < LONG,
            "the host kept running with a wrong password:\n{}",
            host.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let log = host.log();
    assert!(!status.success(), "{log}");
    for expected in [
        "refused this host's SASL credentials",
        "sasl.mechanism=SCRAM-SHA-256",
        &format!("sasl.username={}", broker.user),
        "--kafka-opt sasl.password",
    ] {
        assert!(log.contains(expected), "missing {expected:?} in:\n{log}");
    }
    assert!(!log.contains(&wrong), "the password was printed:\n{log}");
    let took = turned_to_brokers
        .expect("the host turned to the brokers")
        .elapsed();
    assert!(
        took < Duration::from_secs(5),
        "refused after {took:?}, past --connect-timeout 5"
    );
}

fn members(host: &Host) -> Option<f64> {
    host.metric("inbox_host_group_members")
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a broker that answers DescribeGroups: scripts/compat"]
async fn the_coordinator_lists_both_hosts_and_after_one_is_killed_only_the_survivor() {
    let stage = Stage::new(2).await;
    let billing = plugin("billing");
    let assigned = |host: &Host| host.metric("inbox_host_assigned_partitions");
    // One after the other: tansu 0.6.0 fails a join that races another
    // (docs/deploy.md, "Tested against").
    let mut first = stage.spawn_host(&billing, &[]);
    wait_until("the first host assigned both partitions", LONG, || async {
        assigned(&first) == Some(2.0)
    })
    .await;
    let second = stage.spawn_host(&billing, &[]);
    wait_until("one partition each", LONG, || async {
        assigned(&first) == Some(1.0) && assigned(&second) == Some(1.0)
    })
    .await;
    // Orders, so the group commits offsets: tansu lists a group (ListGroups,
    // which librdkafka asks before DescribeGroups) only once it has.
    stage
        .produce(
            (0..20)
                .map(|n| stage.order(&format!("before-{n}"), n))
                .collect(),
        )
        .await;
    wait_until("both hosts listed by the coordinator", LONG, || async {
        [&first, &second].iter().all(|h| {
            members(h) == Some(2.0) && h.metric("inbox_host_group_member_listed") == Some(1.0)
        })
    })
    .await;
    first.kill_hard();
    wait_until("only the survivor listed", LONG, || async {
        members(&second) == Some(1.0)
            && second.metric("inbox_host_group_member_listed") == Some(1.0)
    })
    .await;
    stage.produce(vec![stage.order("after-the-kill", 5)]).await;
    wait_until(
        "every order invoiced, the last by the survivor",
        LONG,
        || async { stage.db.count("SELECT count(*) FROM invoices").await == 21 },
    )
    .await;
}
