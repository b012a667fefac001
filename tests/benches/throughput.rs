//! Messages per second of the billing plugin against the same INSERT in a native
//! Rust handler, through the same runner: in process, and end to end through a
//! Kafka-protocol broker. Rounds alternate between the two so machine noise hits
//! both; medians and their ratios are printed in one table.
//!
//! `cargo bench -p inbox-host-tests` (BENCH_MESSAGES=n to change the round size).

use std::sync::Arc;
use std::time::{Duration, Instant};

use inbox_host::app::{HandlerSource, NativeBilling, Pipeline, StopWhen};
use inbox_host::embedded::{Durability, LocalBroker};
use inbox_host::inbox::{self, Handler, Outcome, Runner, RunnerSettings, Strategy};
use inbox_host::kafka::{self, Consumer, ConsumerSettings, IdSources};
use inbox_host::plugin::{Plugin, Runtime, SandboxLimits};
use inbox_host_tests::{order, plugin, unique, TestDb};

const ROUNDS: usize = 5;

fn main() {
    let messages: usize = std::env::var("BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let db = TestDb::start_with(Durability::Production).await;
        let runtime = Runtime::new(SandboxLimits::default()).expect("wasm runtime");
        let wasm = Arc::new(Plugin::load(&runtime, &plugin("billing")).expect("billing.wasm"));
        let native = Arc::new(NativeBilling::default());
        let runner = runner(&db, "bench");

        println!("inbox-host throughput: billing.wasm vs native Rust, {messages} messages x {ROUNDS} rounds, median msg/s");
        println!("PostgreSQL with fsync and synchronous commit on; one transaction per message\n");
        let (mut w, mut n) = (Vec::new(), Vec::new());
        in_process(&runner, &*wasm, 100, "warm-w").await;
        in_process(&runner, &*native, 100, "warm-n").await;
        for round in 0..ROUNDS {
            w.push(in_process(&runner, &*wasm, messages, &format!("w{round}")).await);
            n.push(in_process(&runner, &*native, messages, &format!("n{round}")).await);
        }
        let mut table = vec![row("runner, in process", &w, &n)];

        // The statement check: parse cost per statement, and the whole path with it
        // off (never an option in production) against on.
        let unchecked_runtime = Runtime::new(SandboxLimits { check_sql: false, ..SandboxLimits::default() }).expect("runtime");
        let unchecked = Plugin::load(&unchecked_runtime, &plugin("billing")).expect("billing.wasm");
        let (mut on, mut off) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            on.push(in_process(&runner, &*wasm, messages, &format!("c{round}")).await);
            off.push(in_process(&runner, &unchecked, messages, &format!("u{round}")).await);
        }
        let check_us = statement_check_cost();
        let swap_ms = load_and_check_ms(&runtime).await;

        let broker = LocalBroker::start().expect("broker");
        let (mut w, mut n) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS.min(3) {
            w.push(through_kafka(&db, &broker, wasm.clone(), messages).await);
            n.push(through_kafka(&db, &broker, native.clone(), messages).await);
            eprintln!("end-to-end round {round} done");
        }
        table.push(row("end to end via Kafka", &w, &n));

        println!("{:<24} {:>16} {:>14} {:>13} {:>16}", "path", "billing.wasm/s", "native/s", "wasm/native", "wasm cost/msg");
        for line in table {
            println!("{line}");
        }
        println!();
        println!("statement check (libpg_query), uncached: {check_us:.1} µs per statement (median of 5 x 2,000); verdicts are cached per SQL text");
        println!(
            "billing.wasm with the check vs without: {:.0} vs {:.0} msg/s, ratio {:.3}",
            median(&on),
            median(&off),
            median(&on) / median(&off)
        );
        println!("hot swap: compiling + checking + instantiating a new billing.wasm takes {swap_ms:.0} ms (median of 5); messages keep flowing meanwhile");
    });
}

fn runner(db: &TestDb, group: &str) -> Runner {
    Runner::new(
        db.pool.clone(),
        RunnerSettings {
            group: group.into(),
            worker_id: "bench".into(),
            strategy: Strategy::ExactlyOnceInbox,
            lock_timeout: Duration::from_secs(2),
            statement_timeout: Duration::from_secs(10),
            guest_role: Some(inbox::DEFAULT_GUEST_ROLE.into()),
        },
    )
}

/// Messages per second through `Runner::process` directly.
async fn in_process<H: Handler>(runner: &Runner, handler: &H, messages: usize, tag: &str) -> f64 {
    let started = Instant::now();
    for i in 0..messages {
        let outcome = runner
            .process(&order(&format!("{tag}-{i}"), 1), handler)
            .await;
        assert_eq!(outcome, Outcome::Processed);
    }
    messages as f64 / started.elapsed().as_secs_f64()
}

/// Messages per second from the first delivery to the last (group join excluded),
/// through the same pipeline the binary runs.
async fn through_kafka<S: HandlerSource>(
    db: &TestDb,
    broker: &LocalBroker,
    source: S,
    messages: usize,
) -> f64 {
    let topic = unique("bench");
    broker.create_topic(&topic, 3).expect("topic");
    let records: Vec<_> = (0..messages)
        .map(|i| {
            let id = format!("{topic}-{i}");
            kafka::OutgoingRecord {
                topic: topic.clone(),
                partition: None,
                key: Some(id.clone().into_bytes()),
                headers: vec![("message_id".into(), id.clone().into_bytes())],
                payload: serde_json::json!({ "order_id": id, "amount": 1 })
                    .to_string()
                    .into_bytes(),
            }
        })
        .collect();
    kafka::produce(broker.bootstrap(), &records)
        .await
        .expect("produce");
    let consumer = Consumer::join(&ConsumerSettings {
        brokers: broker.bootstrap().to_string(),
        group: topic.clone(),
        topics: vec![topic.clone()],
        id_sources: IdSources::default(),
        extra: vec![],
        revoke_grace: Duration::from_secs(10),
    })
    .expect("consumer");
    let (pipeline, mut seen) = Pipeline::observed(consumer, runner(db, &topic), source);
    let stop = StopWhen {
        after_deliveries: Some(messages as u64),
        caught_up: false,
    };
    let timing = tokio::spawn(async move {
        let mut first = None;
        let mut last = Instant::now();
        while let Some(_delivery) = seen.recv().await {
            first.get_or_insert_with(Instant::now);
            last = Instant::now();
        }
        (first, last)
    });
    pipeline
        .run(std::future::pending(), stop)
        .await
        .expect("pipeline");
    let (first, last) = timing.await.expect("timing");
    let first = first.expect("nothing delivered");
    (messages - 1) as f64 / (last - first).as_secs_f64()
}

/// Median µs of one uncached statement check of billing's INSERT.
fn statement_check_cost() -> f64 {
    let sql = "INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ($1, $2, $3, $4)";
    let rounds: Vec<f64> = (0..5)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..2_000 {
                inbox_host::plugin::check_statement(std::hint::black_box(sql)).expect("allowed");
            }
            started.elapsed().as_secs_f64() * 1e6 / 2_000.0
        })
        .collect();
    median(&rounds)
}

/// Median ms to load a plugin the way a hot swap does.
async fn load_and_check_ms(runtime: &Runtime) -> f64 {
    let mut times = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let plugin = Plugin::load(runtime, &plugin("billing")).expect("billing.wasm");
        plugin.check_instantiation().await.expect("instantiates");
        times.push(started.elapsed().as_secs_f64() * 1e3);
    }
    median(&times)
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn row(path: &str, wasm: &[f64], native: &[f64]) -> String {
    let (w, n) = (median(wasm), median(native));
    let cost_us = (1.0 / w - 1.0 / n) * 1e6;
    format!(
        "{path:<24} {w:>16.0} {n:>14.0} {:>13.2} {:>13.0} µs",
        w / n,
        cost_us
    )
}
