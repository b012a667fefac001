//! Key lanes (`--key-lanes`, docs/performance.md), in one run: the release
//! binary on a topic of one partition, records with keys of their own.
//! - A handler that waits 20 ms per record (charge.wasm's call in the handler
//!   to a local server that answers after 20 ms), lanes 1, 4, 16 and 64, with
//!   64 connections (`--db-pool-size`, `--http-concurrency`) and batches of
//!   10 (a batch holds its transaction across its calls): records per second
//!   against 1 lane's times the lanes.
//! - billing.wasm (no wait) on the same partition, lanes 1 and 16, against no
//!   `--key-lanes` flag: what lanes cost a handler that does not wait.
//!
//! Rounds alternate their order; medians. `scripts/bench --bench lanes`, or
//! `cargo bench -p inbox-host-tests --bench lanes` after `cargo build
//! --release -p inbox-host --bins`. BENCH_MESSAGES=n sets the billing rows'
//! records per round (default 20,000); the waiting rows take 150 per lane.

use std::time::Duration;

use inbox_host_tests::bench::e2e::{end_to_end, Run};
use inbox_host_tests::bench::{self, median, settle};

const ROUNDS: usize = 5;
const WAIT: Duration = Duration::from_millis(20);
const LANES: [usize; 4] = [1, 4, 16, 64];
const CONNECTIONS: &str = "64";
const PER_LANE: usize = 150;

fn main() {
    let messages = bench::messages_per_round(20_000);
    bench::runtime().block_on(async move {
        let (db, broker) = bench::production_stage().await;
        let origin = slow_server().await;
        println!("inbox-host key lanes: one partition, {ROUNDS} rounds, medians");
        println!(
            "PostgreSQL with fsync and synchronous commit on; the host is the release binary\n"
        );
        let knobs = serde_json::json!({ "charge_url": format!("{origin}/charges") });
        let stamp = Some(bench::in_hour(0, bench::MID_HOUR));
        let mut waiting: Vec<Vec<f64>> = vec![Vec::new(); LANES.len()];
        let mut billing: Vec<Vec<f64>> = vec![Vec::new(); 3];
        for round in 0..ROUNDS {
            let order: Vec<usize> = if round % 2 == 0 {
                (0..LANES.len()).collect()
            } else {
                (0..LANES.len()).rev().collect()
            };
            for at in order {
                let lanes = LANES[at].to_string();
                let flags = [
                    "--key-lanes",
                    &lanes,
                    "--batch-max",
                    "10",
                    "--db-pool-size",
                    CONNECTIONS,
                    "--http-concurrency",
                    CONNECTIONS,
                    "--http-allow",
                    &origin,
                ];
                let run = Run {
                    plugin: "charge",
                    flags: &flags,
                    relayed: false,
                    requested: false,
                    knobs: Some(&knobs),
                    group: None,
                    timestamp_ms: stamp,
                    partitions: Some(1),
                };
                settle(&db).await;
                let records = (PER_LANE * LANES[at]).max(300);
                waiting[at].push(end_to_end(&db, &broker, &run, records).await.per_second);
            }
            let sides: [&[&str]; 3] = [&[], &["--key-lanes", "1"], &["--key-lanes", "16"]];
            for at in if round % 2 == 0 { [0, 1, 2] } else { [2, 1, 0] } {
                let run = Run {
                    plugin: "billing",
                    flags: sides[at],
                    relayed: false,
                    requested: false,
                    knobs: None,
                    group: None,
                    timestamp_ms: stamp,
                    partitions: Some(1),
                };
                settle(&db).await;
                billing[at].push(end_to_end(&db, &broker, &run, messages).await.per_second);
            }
            eprintln!("round {} of {ROUNDS} done", round + 1);
        }
        let waiting: Vec<f64> = waiting.iter().map(|v| median(v)).collect();
        let billing: Vec<f64> = billing.iter().map(|v| median(v)).collect();
        println!(
            "{:<58} {:>9} {:>12} {:>7}",
            "a handler waiting 20 ms per record", "per s", "N x 1 lane", "ratio"
        );
        for (at, lanes) in LANES.iter().enumerate() {
            let against = waiting[0] * *lanes as f64;
            println!(
                "{:<58} {:>9.0} {against:>12.0} {:>7.2}",
                format!("--key-lanes {lanes}"),
                waiting[at],
                waiting[at] / against
            );
        }
        println!(
            "\n{:<58} {:>9} {:>12} {:>7}",
            "billing.wasm (no wait)", "per s", "no flag", "ratio"
        );
        for (at, name) in ["no --key-lanes", "--key-lanes 1", "--key-lanes 16"]
            .iter()
            .enumerate()
        {
            println!(
                "{name:<58} {:>9.0} {:>12.0} {:>7.2}",
                billing[at],
                billing[0],
                billing[at] / billing[0]
            );
        }
    });
}

/// A keep-alive HTTP server on loopback that answers every request with a
/// charge after [`WAIT`]; returns its origin.
async fn slow_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let origin = format!("http://{}", listener.local_addr().expect("address"));
    let app = axum::Router::new().fallback(|| async {
        tokio::time::sleep(WAIT).await;
        (
            [("content-type", "application/json")],
            r#"{"charge_id":"ch-1"}"#,
        )
    });
    tokio::spawn(async move { axum::serve(listener, app).await.expect("server") });
    origin
}
