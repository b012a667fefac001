//! The outbox in motion: a two-step pipeline under repeated SIGKILLs ends
//! with exactly one effect per order downstream; one key's messages leave in
//! the order they were written across rebalances; a broker outage keeps the
//! rows (and says so) and a full outbox holds the consume side back.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use inbox_host::kafka::OutgoingRecord;
use inbox_host_tests::host::{self, Host};
use inbox_host_tests::stage::Stage;
use inbox_host_tests::{plugin, unique, wait_until};

use crate::outbox::{outbox_emptied, outbox_rows};

const LONG: Duration = Duration::from_secs(300);
const OUT: &str = "invoices-created";

#[tokio::test(flavor = "multi_thread")]
async fn a_two_step_pipeline_under_repeated_kills_leaves_exactly_one_ledger_row_per_order() {
    const ORDERS: i64 = 10_000;
    let stage = Stage::new(3).await;
    stage
        .broker
        .create_topic(OUT, 3)
        .await
        .expect("output topic");
    let ledger_group = unique("ledger");
    let (billing, ledger) = (plugin("billing-publish"), plugin("ledger"));
    let spawn_billing = || stage.spawn_host(&billing, &["--publish-topic", OUT]);
    let spawn_ledger = || stage.spawn_member(&ledger_group, OUT, &ledger, &[], &[]);
    stage
        .produce(
            (0..ORDERS)
                .map(|n| stage.order(&format!("order-{n}"), n))
                .collect(),
        )
        .await;
    // Two hosts per step; all four share the database, so one of them relays.
    let mut billers = [spawn_billing(), spawn_billing()];
    let mut ledgers = [spawn_ledger(), spawn_ledger()];

    // SIGKILL one host of each step at points of its progress (every kill
    // loses whatever that host had in flight: transactions, unacknowledged
    // offsets, and the relay's round if it was the one relaying).
    let invoice_points = [1_000, 4_000, 7_000];
    let ledger_points = [500, 3_000, 6_000];
    let (mut next_biller, mut next_ledger) = (0, 0);
    let mut kills_in_flight = 0;
    let started = std::time::Instant::now();
    while next_biller < invoice_points.len() || next_ledger < ledger_points.len() {
        let invoices = stage.db.count("SELECT count(*) FROM invoices").await;
        let booked = stage.db.count("SELECT count(*) FROM ledger").await;
        if next_biller < invoice_points.len() && invoices >= invoice_points[next_biller] {
            kills_in_flight += i64::from(invoices < ORDERS);
            billers[next_biller % 2].kill_hard();
            billers[next_biller % 2] = spawn_billing();
            next_biller += 1;
        }
        if next_ledger < ledger_points.len() && booked >= ledger_points[next_ledger] {
            kills_in_flight += i64::from(booked < ORDERS);
            ledgers[next_ledger % 2].kill_hard();
            ledgers[next_ledger % 2] = spawn_ledger();
            next_ledger += 1;
        }
        assert!(
            started.elapsed() < LONG,
            "stuck before the kill points: {invoices} invoices, {booked} ledger rows"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("{kills_in_flight} of 6 kills landed while their step still had work");

    wait_until("every order booked in the ledger", LONG, || async {
        stage
            .db
            .count("SELECT count(DISTINCT order_id) FROM ledger")
            .await
            == ORDERS
            && outbox_rows(&stage).await == 0
    })
    .await;
    assert_eq!(
        stage.db.count("SELECT count(*) FROM ledger").await,
        ORDERS,
        "a ledger row twice: a message was handled twice downstream"
    );
    assert_eq!(
        stage.db.count("SELECT count(*) FROM invoices").await,
        ORDERS
    );
    assert!(
        kills_in_flight >= 3,
        "too few kills hit running work to test anything"
    );
}

/// An order of customer `key`, the `seq`th of that customer: the incoming
/// record and the published message are both keyed by the customer.
fn customer_order(stage: &Stage, key: usize, seq: usize) -> OutgoingRecord {
    let id = format!("c{key}-{seq:04}");
    let payload = serde_json::json!({ "order_id": id, "amount": seq, "key": format!("c{key}") });
    OutgoingRecord {
        topic: stage.topic.clone(),
        partition: None,
        timestamp_ms: None,
        key: Some(format!("c{key}").into_bytes()),
        headers: vec![("message_id".into(), id.clone().into_bytes())],
        payload: payload.to_string().into_bytes(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn one_keys_messages_leave_in_the_order_written_across_rebalances_and_a_kill() {
    const KEYS: usize = 12;
    const PER_KEY: usize = 150;
    let stage = Stage::new(3).await;
    stage
        .broker
        .create_topic(OUT, 3)
        .await
        .expect("output topic");
    let billing = plugin("billing-publish");
    let spawn = || stage.spawn_host(&billing, &["--publish-topic", OUT]);
    let total = (KEYS * PER_KEY) as i64;
    let invoiced = || async { stage.db.count("SELECT count(*) FROM invoices").await };
    let produce_round = |round: usize| {
        let per_round = PER_KEY / 3;
        (round * per_round..(round + 1) * per_round)
            .flat_map(|seq| (0..KEYS).map(move |key| (key, seq)))
            .map(|(key, seq)| customer_order(&stage, key, seq))
            .collect::<Vec<_>>()
    };

    // One host, then three (a rebalance), then one stopped and one killed
    // (two more), with orders arriving between them.
    let mut hosts = vec![spawn()];
    stage.produce(produce_round(0)).await;
    wait_until("the first orders invoiced", LONG, || async {
        invoiced().await >= (total / 6)
    })
    .await;
    hosts.push(spawn());
    hosts.push(spawn());
    stage.produce(produce_round(1)).await;
    wait_until("two thirds invoiced", LONG, || async {
        invoiced().await >= total * 2 / 3
    })
    .await;
    assert!(hosts[0].stop(), "a clean stop:\n{}", hosts[0].log());
    hosts[1].kill_hard();
    stage.produce(produce_round(2)).await;
    wait_until("every order invoiced and relayed", LONG, || async {
        invoiced().await == total && outbox_rows(&stage).await == 0
    })
    .await;

    let mut sequences: HashMap<String, Vec<usize>> = HashMap::new();
    let mut seen = HashSet::new();
    for partition in stage.read_topic(OUT, 3).await {
        for record in partition {
            // A relay killed between the broker's ack and its delete sends a
            // row again with the same id: a reader deduplicates by id.
            if !seen.insert(record.header("message_id").expect("an id")) {
                continue;
            }
            let body: serde_json::Value = serde_json::from_slice(&record.payload).expect("json");
            let order = body["order_id"].as_str().expect("order id");
            let (customer, seq) = order.split_once('-').expect("c<k>-<seq>");
            assert_eq!(record.key.as_deref(), Some(customer.as_bytes()));
            sequences
                .entry(customer.to_string())
                .or_default()
                .push(seq.parse().expect("seq"));
        }
    }
    assert_eq!(sequences.len(), KEYS);
    for (customer, seqs) in &sequences {
        let expected: Vec<usize> = (0..PER_KEY).collect();
        assert_eq!(
            seqs, &expected,
            "customer {customer}'s messages out of order or missing"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broker_outage_keeps_the_rows_says_why_and_they_leave_once_it_is_back() {
    const ROWS: i64 = 50;
    let stage = Stage::new(1).await;
    stage
        .broker
        .create_topic(OUT, 1)
        .await
        .expect("output topic");
    let host = stage.spawn_host(
        &plugin("billing-publish"),
        &["--publish-topic", OUT, "--stall-after-secs", "2"],
    );
    let addr = host.status_addr().await;
    wait_until("the host ready and relaying", LONG, || async {
        host.is_ready() && host.metric("inbox_host_relay_leading") == Some(1.0)
    })
    .await;

    stage.broker.set_down(true).expect("broker down");
    // Rows an application writes while the broker is away (the table is a
    // contract: docs/outbox.md).
    stage
        .db
        .execute(&format!(
            "INSERT INTO inbox_host.outbox (topic, message_key, payload)
             SELECT '{OUT}', convert_to('k' || n, 'UTF8'), convert_to('v' || n, 'UTF8')
             FROM generate_series(1, {ROWS}) AS n"
        ))
        .await;
    wait_until("/health/ready names the relay", LONG, || async {
        let answer = host::http_get(&addr, "/health/ready");
        answer.starts_with("HTTP/1.1 503")
            && answer.contains("the outbox relay has not been able to send")
    })
    .await;
    assert_eq!(
        outbox_rows(&stage).await,
        ROWS,
        "no row deleted without an ack"
    );

    stage.broker.set_down(false).expect("broker up");
    outbox_emptied(&stage).await;
    let sent = stage.read_partition(OUT).await;
    let ids: HashSet<String> = sent.iter().filter_map(|r| r.header("message_id")).collect();
    assert_eq!(
        ids.len() as i64,
        ROWS,
        "every row sent: {} records",
        sent.len()
    );
    wait_until("/health/ready answers 200 again", LONG, || async {
        host.is_ready()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_outbox_holds_the_consume_side_until_the_relay_drains_it() {
    let stage = Stage::new(1).await;
    stage
        .broker
        .create_topic(OUT, 1)
        .await
        .expect("output topic");
    let orders = |from: i64, to: i64| {
        (from..to)
            .map(|n| stage.order(&format!("order-{n}"), n))
            .collect()
    };
    stage.produce(orders(0, 10)).await;
    let host = stage.spawn_host(
        &plugin("billing-publish"),
        &[
            "--publish-topic",
            OUT,
            "--no-relay",
            "--max-outbox-backlog",
            "5",
        ],
    );
    wait_until("the host says the outbox is full", LONG, || async {
        host.log()
            .contains("the outbox holds --max-outbox-backlog rows or more")
    })
    .await;
    let held = stage.db.count("SELECT count(*) FROM invoices").await;
    stage.produce(orders(10, 20)).await;
    // The scenario: three seconds of a full outbox, not a wait for some state.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        stage.db.count("SELECT count(*) FROM invoices").await,
        held,
        "records were taken while the outbox was full"
    );

    let _relay = Host::spawn(
        &["relay"],
        &[
            ("DATABASE_URL", &stage.db.url),
            ("KAFKA_BROKERS", stage.broker.bootstrap()),
        ],
    );
    wait_until("every order invoiced and relayed", LONG, || async {
        stage.db.count("SELECT count(*) FROM invoices").await == 20
            && outbox_rows(&stage).await == 0
    })
    .await;
}
