//! The outbox's cost, in one run (docs/performance.md): the release binary in
//! batch mode (the defaults) with billing.wasm (inbox only) against
//! billing-publish.wasm (the same invoice, plus one message published per
//! record and relayed, the round ending when the relay has sent the last one);
//! and the relay alone draining committed rows against its ceiling, the same
//! messages produced by the same producer in the same rounds of 2,000 with no
//! table behind them. Rounds alternate the order of each pair; medians.
//!
//! `scripts/bench` runs it with the other benchmarks; `cargo bench -p
//! inbox-host-tests --bench outbox` alone (after `cargo build --release -p
//! inbox-host --bins`). BENCH_MESSAGES=n sets the records per round (default 10,000).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use inbox_host::app::relay::{relay_forever, RelayStatus};
use inbox_host::embedded::LocalBroker;
use inbox_host::kafka::{Publication, Publisher};
use inbox_host_tests::bench::e2e::{end_to_end, Run};
use inbox_host_tests::bench::{self, median, settle, PARTITIONS};
use inbox_host_tests::TestDb;

const ROUNDS: usize = 5;
/// The topic billing-publish announces invoices on.
const OUT: &str = "invoices-created";
/// A Kafka header as a [`Publication`] takes it.
type Header<'a> = (&'a str, Option<&'a [u8]>);
/// The relay's round size (app/relay.rs), which the ceiling copies.
const RELAY_BATCH: usize = 2_000;

fn main() {
    let messages = bench::messages_per_round(10_000);
    bench::runtime().block_on(async move {
        let (db, broker) = bench::production_stage().await;
        broker.create_topic(OUT, PARTITIONS).expect("output topic");
        println!("inbox-host outbox: {PARTITIONS} partitions in and out, {messages} records x {ROUNDS} rounds, medians");
        println!("PostgreSQL with fsync and synchronous commit on; the host is the release binary\n");
        let inbox_only = Run { plugin: "billing", flags: &[], relayed: false, requested: false, knobs: None, group: None, timestamp_ms: Some(bench::in_hour(0, bench::MID_HOUR)), partitions: None };
        let publishing = Run { plugin: "billing-publish", flags: &["--publish-topic", OUT], relayed: true, requested: false, knobs: None, group: None, timestamp_ms: Some(bench::in_hour(0, bench::MID_HOUR)), partitions: None };
        let (mut plain, mut published) = (Vec::new(), Vec::new());
        let (mut relayed, mut produced) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            let flip = round % 2 == 1;
            for first in [!flip, flip] {
                settle(&db).await;
                if first {
                    plain.push(end_to_end(&db, &broker, &inbox_only, messages).await.per_second);
                } else {
                    published.push(end_to_end(&db, &broker, &publishing, messages).await.per_second);
                }
            }
            for first in [!flip, flip] {
                settle(&db).await;
                if first {
                    relayed.push(relay_alone(&db, &broker, messages).await);
                } else {
                    produced.push(produce_alone(&broker, messages).await);
                }
            }
            eprintln!("round {} of {ROUNDS} done", round + 1);
        }
        let [plain, published, relayed, produced] =
            [plain, published, relayed, produced].map(|rates| median(&rates));
        println!("{:<58} {:>10} {:>10} {:>7}", "", "msg/s", "against", "ratio");
        println!(
            "{:<58} {published:>10.0} {plain:>10.0} {:>7.2}",
            "consume-transform-produce vs inbox only (batch mode)",
            published / plain
        );
        println!(
            "{:<58} {relayed:>10.0} {produced:>10.0} {:>7.2}",
            "relay alone vs the same produce without the outbox",
            relayed / produced
        );
    });
}

/// A message like the one billing-publish stages for order `n`.
fn announced(n: usize) -> String {
    serde_json::json!({ "order_id": format!("order-{n}"), "amount": 1, "invoice_of": format!("order-{n}") })
        .to_string()
}

/// Messages per second the relay sends from `rows` committed outbox rows,
/// timed from the moment it leads to the moment the last one is acknowledged
/// and deleted.
async fn relay_alone(db: &TestDb, broker: &LocalBroker, rows: usize) -> f64 {
    sqlx::query(
        "INSERT INTO inbox_host.outbox (topic, message_key, payload, headers)
         SELECT $1, convert_to('order-' || n, 'UTF8'), convert_to($2, 'UTF8'),
                '[[\"event-type\", \"invoice-created\"]]'
         FROM generate_series(1, $3) AS n",
    )
    .bind(OUT)
    .bind(announced(0))
    .bind(rows as i64)
    .execute(&db.pool)
    .await
    .expect("rows to relay");
    let status = Arc::new(RelayStatus::default());
    let publisher = Publisher::for_relay(broker.bootstrap(), &[]).expect("producer");
    let relay = tokio::spawn(relay_forever(db.pool.clone(), publisher, status.clone()));
    // The last round's relay may hold the lock for a moment after its abort.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !status.leading.load(Ordering::Relaxed) {
        assert!(Instant::now() < deadline, "the relay never led");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let started = Instant::now();
    while status.sent.load(Ordering::Relaxed) < rows as u64 {
        assert!(Instant::now() < deadline, "the relay stalled");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let rate = rows as f64 / started.elapsed().as_secs_f64();
    relay.abort();
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM inbox_host.outbox")
        .fetch_one(&db.pool)
        .await
        .expect("count");
    assert_eq!(left, 0, "every sent row deleted");
    rate
}

/// Messages per second of the relay's producer sending the same messages
/// (key, value, `message_id` and `event-type` headers) in the same rounds,
/// with no table to read or delete from: the relay's ceiling.
async fn produce_alone(broker: &LocalBroker, messages: usize) -> f64 {
    let publisher = Publisher::for_relay(broker.bootstrap(), &[]).expect("producer");
    let rows: Vec<(String, String, String)> = (0..messages)
        // An id as long as the relay's generated UUIDs.
        .map(|n| {
            (
                format!("order-{n}"),
                announced(0),
                format!("00000000-0000-4000-8000-{n:012}"),
            )
        })
        .collect();
    let started = Instant::now();
    for chunk in rows.chunks(RELAY_BATCH) {
        let headers: Vec<[Header; 2]> = chunk
            .iter()
            .map(|(_, _, id)| {
                [
                    ("message_id", Some(id.as_bytes())),
                    ("event-type", Some(&b"invoice-created"[..])),
                ]
            })
            .collect();
        let publications: Vec<Publication> = chunk
            .iter()
            .zip(&headers)
            .map(|((key, value, _), headers)| Publication {
                topic: OUT,
                key: Some(key.as_bytes()),
                headers,
                payload: Some(value.as_bytes()),
                timestamp_ms: None,
            })
            .collect();
        for sent in publisher.publish_all(&publications).await {
            sent.expect("acknowledged");
        }
    }
    messages as f64 / started.elapsed().as_secs_f64()
}
