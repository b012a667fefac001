//! Calls beyond the database, in one run (docs/performance.md), against a local
//! keep-alive HTTP server in this process:
//! - the sender of requests after commit draining committed rows, against the
//!   same server driven by a plain client (reqwest, keep-alive) with the same
//!   requests in flight (`--http-concurrency`): the ceiling;
//! - the release binary in batch mode with notify.wasm (an invoice and one
//!   request after commit per record, the round ending when the last request
//!   is answered) against billing.wasm (the invoice alone);
//! - a call in the handler through the host's hook and gate (charge.wasm in
//!   process, ten calls per record against none), per call, against a direct
//!   call to the same server from the same process.
//!
//! Rounds alternate the order of each pair; medians.
//!
//! `scripts/bench` runs it with the others; `cargo bench -p inbox-host-tests
//! --bench requests` alone (after `cargo build --release -p inbox-host --bins`).
//! BENCH_MESSAGES=n sets the records per round (default 10,000).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use inbox_host::app::requests::{send_forever, SenderSettings};
use inbox_host::egress::{AllowList, Gate, GateSettings, Schedule};
use inbox_host::inbox::{Message, Outcome};
use inbox_host::plugin::{Plugin, RequestLimits, Runtime, SandboxLimits};
use inbox_host_tests::bench::e2e::{end_to_end, Run};
use inbox_host_tests::bench::{self, median, settle};
use inbox_host_tests::{order, plugin, unique, TestDb};

const ROUNDS: usize = 5;
/// Requests in flight per origin: the default `--http-concurrency`.
const IN_FLIGHT: usize = 8;
/// Calls per record in the hook's row, and records per measurement.
const CALLS: usize = 10;
const CALL_RECORDS: usize = 100;

fn main() {
    let messages = bench::messages_per_round(10_000);
    bench::runtime().block_on(async move {
        let (db, broker) = bench::production_stage().await;
        let server = Server::start().await;
        println!("inbox-host calls beyond the database: a local keep-alive HTTP server, {messages} records x {ROUNDS} rounds, medians");
        println!("PostgreSQL with fsync and synchronous commit on; the host is the release binary\n");
        let allow = ["--http-allow", server.origin.as_str()];
        let knobs = serde_json::json!({ "notify_url": format!("{}/notify", server.origin) });
        let inbox_only = Run { plugin: "billing", flags: &[], relayed: false, requested: false, knobs: None, group: None, timestamp_ms: Some(bench::in_hour(0, bench::MID_HOUR)), partitions: None };
        let requesting = Run { plugin: "notify", flags: &allow, relayed: false, requested: true, knobs: Some(&knobs), group: None, timestamp_ms: Some(bench::in_hour(0, bench::MID_HOUR)), partitions: None };
        let charge = charge_plugin(&server).await;
        let (mut sender, mut plain) = (Vec::new(), Vec::new());
        let (mut requested, mut inbox) = (Vec::new(), Vec::new());
        let (mut hooked, mut direct) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            let flip = round % 2 == 1;
            for first in [!flip, flip] {
                settle(&db).await;
                if first {
                    sender.push(sender_alone(&db, &server, messages).await);
                } else {
                    plain.push(plain_client(&server, messages).await);
                }
            }
            for first in [!flip, flip] {
                settle(&db).await;
                if first {
                    requested.push(end_to_end(&db, &broker, &requesting, messages).await.per_second);
                } else {
                    inbox.push(end_to_end(&db, &broker, &inbox_only, messages).await.per_second);
                }
            }
            settle(&db).await;
            for first in [!flip, flip] {
                if first {
                    hooked.push(ms_per_call_through_the_hook(&db, &charge, &server, round).await);
                } else {
                    direct.push(ms_per_direct_call(&server).await);
                }
            }
            eprintln!("round {} of {ROUNDS} done", round + 1);
        }
        let [sender, plain, requested, inbox, hooked, direct] =
            [sender, plain, requested, inbox, hooked, direct].map(|v| median(&v));
        println!("{:<62} {:>10} {:>10} {:>7}", "", "per s", "against", "ratio");
        println!(
            "{:<62} {sender:>10.0} {plain:>10.0} {:>7.2}",
            format!("requests after commit: the sender vs a plain client ({IN_FLIGHT} in flight)"),
            sender / plain
        );
        println!(
            "{:<62} {requested:>10.0} {inbox:>10.0} {:>7.2}",
            "inbox + one request after commit per record vs inbox only",
            requested / inbox
        );
        println!("\n{:<62} {:>10} {:>10} {:>10}", "", "ms/call", "direct", "overhead");
        println!(
            "{:<62} {hooked:>10.3} {direct:>10.3} {:>10.3}",
            "a call in the handler (wasi:http, hook, gate) vs a direct call",
            hooked - direct
        );
    });
}

/// A keep-alive HTTP server on loopback answering every request 200 with a
/// charge, counting them.
struct Server {
    origin: String,
    answered: Arc<AtomicU64>,
}

impl Server {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let origin = format!("http://{}", listener.local_addr().expect("address"));
        let answered = Arc::new(AtomicU64::new(0));
        let counted = answered.clone();
        let app = axum::Router::new().fallback(move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::Relaxed);
                (
                    [("content-type", "application/json")],
                    r#"{"charge_id":"ch-1"}"#,
                )
            }
        });
        tokio::spawn(async move { axum::serve(listener, app).await.expect("server") });
        Self { origin, answered }
    }

    fn gate(&self) -> Arc<Gate> {
        let allow = AllowList::parse(std::slice::from_ref(&self.origin)).expect("rule");
        Arc::new(
            Gate::new(GateSettings {
                allow: Arc::new(allow),
                ..GateSettings::default()
            })
            .expect("gate"),
        )
    }
}

const BODY: &str = r#"{"order_id":"order-1","amount":1}"#;

/// Requests per second the sender sends from `rows` committed requests, timed
/// from its start to the last answer, every row deleted.
async fn sender_alone(db: &TestDb, server: &Server, rows: usize) -> f64 {
    let group = unique("sender");
    sqlx::query(
        "INSERT INTO inbox_host.requests
           (consumer_group, idempotency_key, method, url, headers, body, ordering_key,
            caused_by, topic, kafka_partition, kafka_offset)
         SELECT $1, 'key-' || n, 'POST', $2, '[[\"content-type\", \"application/json\"]]',
                convert_to($3, 'UTF8'), 'order-' || n, 'order-' || n, 'orders', 0, n
         FROM generate_series(1, $4) AS n",
    )
    .bind(&group)
    .bind(format!("{}/notify", server.origin))
    .bind(BODY)
    .bind(rows as i64)
    .execute(&db.pool)
    .await
    .expect("rows to send");
    let before = server.answered.load(Ordering::Relaxed);
    let settings = SenderSettings {
        group: group.clone(),
        worker_id: "bench".into(),
        schedule: Schedule::default(),
        per_origin: IN_FLIGHT,
        lease: Duration::from_secs(30),
    };
    let started = Instant::now();
    let sending = tokio::spawn(send_forever(
        db.pool.clone(),
        server.gate(),
        Arc::new(tokio::sync::Notify::new()),
        settings,
    ));
    let deadline = started + Duration::from_secs(300);
    // The server's count first (no load on the database the sender uses),
    // then the rows' deletion, which ends the run.
    let mut left = rows as i64;
    while left > 0 {
        let answered = server.answered.load(Ordering::Relaxed) - before;
        if answered >= rows as u64 {
            left = sqlx::query_scalar(
                "SELECT count(*) FROM inbox_host.requests WHERE consumer_group = $1",
            )
            .bind(&group)
            .fetch_one(&db.pool)
            .await
            .expect("count");
        }
        assert!(
            Instant::now() < deadline,
            "the sender stalled with {} of {rows} answered",
            answered
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let rate = rows as f64 / started.elapsed().as_secs_f64();
    sending.abort();
    assert_eq!(
        server.answered.load(Ordering::Relaxed) - before,
        rows as u64,
        "each request sent once"
    );
    rate
}

/// Requests per second of a plain keep-alive client sending the same requests
/// with the same number in flight: the sender's ceiling.
async fn plain_client(server: &Server, requests: usize) -> f64 {
    let client = reqwest::Client::new();
    let url = format!("{}/notify", server.origin);
    let started = Instant::now();
    let answered = futures_util::stream::iter(0..requests)
        .map(|n| {
            let request = client
                .post(&url)
                .header("content-type", "application/json")
                .header("idempotency-key", format!("key-{n}"))
                .body(BODY);
            async move {
                request
                    .send()
                    .await
                    .and_then(|r| r.error_for_status())
                    .is_ok()
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .filter(|ok| std::future::ready(*ok))
        .count()
        .await;
    assert_eq!(answered, requests);
    requests as f64 / started.elapsed().as_secs_f64()
}

/// charge.wasm, its calls through a gate that allows the server.
async fn charge_plugin(server: &Server) -> Plugin {
    let limits = SandboxLimits {
        requests: RequestLimits {
            group: "bench-calls".into(),
            allow: Arc::new(AllowList::parse(std::slice::from_ref(&server.origin)).expect("rule")),
            max_requests: CALLS,
            gate: Some(server.gate()),
            ..RequestLimits::default()
        },
        ..SandboxLimits::default()
    };
    let runtime = Runtime::with_compile_cache(limits, None).expect("runtime");
    Plugin::load(&runtime, &plugin("charge")).expect("charge loads")
}

/// Milliseconds per call through the hook: records making CALLS calls each
/// against the same records making none, one record per transaction, one at
/// a time, the difference per call.
async fn ms_per_call_through_the_hook(
    db: &TestDb,
    charge: &Plugin,
    server: &Server,
    round: usize,
) -> f64 {
    let runner = bench::runner(db, &unique("calls")).await;
    let mut took = [0.0; 2];
    for (slot, calls) in [(0, CALLS), (1, 0)] {
        let records: Vec<Message> = (0..CALL_RECORDS)
            .map(|n| {
                let id = format!("r{round}-c{calls}-{n}");
                let payload = serde_json::json!({
                    "order_id": id, "amount": 1, "calls": calls,
                    "charge_url": format!("{}/charges", server.origin),
                });
                Message {
                    payload: payload.to_string().into_bytes(),
                    ..order(&id, 1)
                }
            })
            .collect();
        let started = Instant::now();
        for record in &records {
            let outcomes = runner.process_batch(&[record], charge).await;
            assert_eq!(outcomes, [Outcome::Processed]);
        }
        took[slot] = started.elapsed().as_secs_f64();
    }
    (took[0] - took[1]) * 1e3 / (CALL_RECORDS * CALLS) as f64
}

/// Milliseconds per call of a plain keep-alive client making the same calls
/// one after another.
async fn ms_per_direct_call(server: &Server) -> f64 {
    let client = reqwest::Client::new();
    let url = format!("{}/charges", server.origin);
    let calls = CALL_RECORDS * CALLS;
    let started = Instant::now();
    for n in 0..calls {
        let answer = client
            .post(&url)
            .header("content-type", "application/json")
            .header("idempotency-key", format!("call-{n}"))
            .body(BODY)
            .send()
            .await
            .expect("an answer");
        answer.bytes().await.expect("a body");
    }
    started.elapsed().as_secs_f64() * 1e3 / calls as f64
}
