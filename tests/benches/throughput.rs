//! The consume path at scale, in one run: the real `inbox-host` binary (release)
//! with billing.wasm, exactly-once-inbox, 6 partitions, fsync and synchronous
//! commit on, in three modes — per-message serial, per-message with 6 batches in
//! flight, and batch mode (the defaults) — each against its ceiling: the same SQL
//! through sqlx (the runner with a native handler) with the same batching and
//! connections, no Kafka, no wasm. Also billing.wasm against the native handler
//! in batch mode, instantiate p50, the statement check's cost and the hot-swap
//! load time. Rounds alternate so machine noise hits every mode; medians.
//!
//! `scripts/bench` (builds the release binary, then `cargo bench -p inbox-host-tests`).
//! BENCH_MESSAGES=n sets the records per round (default 30,000: a batch-mode
//! round then lasts about a second, many samples of the binary's progress); BENCH_PROFILE=wasm
//! (or native) runs only that handler in process in batch mode, a steady load to profile;
//! BENCH_PROFILE=wasm-call (or native-call) calls it one message after another; e2e runs
//! the binary in batch mode (profile it with `perf record -p $(pgrep -n inbox-host)`).

use std::sync::Arc;
use std::time::Instant;

use inbox_host::embedded::LocalBroker;
use inbox_host::embedded::NativeBilling;
use inbox_host::inbox::Handler;
use inbox_host::plugin::{Plugin, Runtime, SandboxLimits};
use inbox_host_tests::bench::e2e::{end_to_end, own_cpu_seconds, Round, Run};
use inbox_host_tests::bench::{self, in_process, median, settle, PARTITIONS};
use inbox_host_tests::{order, plugin, TestDb};

const ROUNDS: usize = 3;

/// One way of running the consume path.
struct Mode {
    name: &'static str,
    batch_max: usize,
    concurrency: usize,
    /// `--reuse-instance`: an instance kept for the next message after a success.
    reuse_instance: bool,
}

const MODES: [Mode; 4] = [
    Mode {
        name: "per-message serial",
        batch_max: 1,
        concurrency: 1,
        reuse_instance: false,
    },
    Mode {
        name: "per-message, concurrency 6",
        batch_max: 1,
        concurrency: 6,
        reuse_instance: false,
    },
    Mode {
        name: "batch mode (defaults)",
        batch_max: 100,
        concurrency: 8,
        reuse_instance: false,
    },
    Mode {
        name: "batch, --reuse-instance",
        batch_max: 100,
        concurrency: 8,
        reuse_instance: true,
    },
];

fn main() {
    let messages = bench::messages_per_round(30_000);
    bench::runtime().block_on(async move {
        let (db, broker) = bench::production_stage().await;
        let runtime = Runtime::new(SandboxLimits::default()).expect("wasm runtime");
        let wasm = Arc::new(Plugin::load(&runtime, &plugin("billing")).expect("billing.wasm"));
        let native = Arc::new(NativeBilling::default());
        if let Ok(which) = std::env::var("BENCH_PROFILE") {
            // A steady load to profile: one handler, in batch mode through the
            // runner or (`wasm-call`, `native-call`) called one message after another.
            for round in 0..5 {
                let tag = format!("p{round}");
                let cpu = own_cpu_seconds();
                let rate = match which.as_str() {
                    "e2e" => in_mode(&db, &broker, &MODES[2], messages).await.per_second,
                    "native" => in_process(&db, &native, MODES[2].batch_max, MODES[2].concurrency, messages, &tag).await,
                    "native-call" => handler_call_cost(&db, &*native, messages, &tag).await.0,
                    "wasm-call" => handler_call_cost(&db, &*wasm, messages, &tag).await.0,
                    _ => in_process(&db, &wasm, MODES[2].batch_max, MODES[2].concurrency, messages, &tag).await,
                };
                let cpu = (own_cpu_seconds() - cpu) * 1e6 / messages as f64;
                println!("{which}: {rate:.0} msg/s, {cpu:.1} µs of CPU per message");
            }
            return;
        }
        let reusing = Runtime::new(SandboxLimits { reuse_instance: true, ..SandboxLimits::default() }).expect("wasm runtime");
        let reused = Arc::new(Plugin::load(&reusing, &plugin("billing")).expect("billing.wasm"));
        println!("inbox-host consume path: billing.wasm, exactly-once-inbox, {PARTITIONS} partitions, {messages} records x {ROUNDS} rounds, medians");
        println!("PostgreSQL with fsync and synchronous commit on; the host is the release binary\n");

        let mut e2e: Vec<Vec<Round>> = MODES.iter().map(|_| Vec::new()).collect();
        let mut ceiling: Vec<Vec<f64>> = MODES.iter().map(|_| Vec::new()).collect();
        // billing.wasm with a fresh instance per message, with --reuse-instance, and native.
        let mut in_process_batch: [Vec<f64>; 3] = Default::default();
        for round in 0..ROUNDS {
            // Each pair runs in both orders across rounds, every run on a settled database.
            let flip = round % 2 == 1;
            for (m, mode) in MODES.iter().enumerate() {
                let ceiling_tag = format!("c{round}-{m}");
                for first in [!flip, flip] {
                    settle(&db).await;
                    if first {
                        e2e[m].push(in_mode(&db, &broker, mode, messages).await);
                    } else {
                        ceiling[m].push(in_process(&db, &native, mode.batch_max, mode.concurrency, messages, &ceiling_tag).await);
                    }
                }
            }
            let batch = &MODES[2];
            for h in (0..3).map(|h| (h + round) % 3) {
                settle(&db).await;
                let tag = format!("h{round}-{h}");
                in_process_batch[h].push(match h {
                    0 => in_process(&db, &wasm, batch.batch_max, batch.concurrency, messages, &tag).await,
                    1 => in_process(&db, &reused, batch.batch_max, batch.concurrency, messages, &tag).await,
                    _ => in_process(&db, &native, batch.batch_max, batch.concurrency, messages, &tag).await,
                });
            }
            eprintln!("round {} of {ROUNDS} done", round + 1);
        }

        println!(
            "{:<28} {:>10} {:>10} {:>11} {:>12} {:>9} {:>10}",
            "mode", "msg/s", "ceiling/s", "of ceiling", "vs serial", "host CPU", "host RSS"
        );
        let serial = median(&e2e[0].iter().map(|r| r.per_second).collect::<Vec<_>>());
        for (m, mode) in MODES.iter().enumerate() {
            let rate = median(&e2e[m].iter().map(|r| r.per_second).collect::<Vec<_>>());
            let cpu = median(&e2e[m].iter().map(|r| r.cpu_us_per_message).collect::<Vec<_>>());
            let rss = e2e[m].iter().map(|r| r.peak_rss_mb).fold(0.0, f64::max);
            let ceil = median(&ceiling[m]);
            println!(
                "{:<28} {rate:>10.0} {ceil:>10.0} {:>11.2} {:>11.2}x {:>6.0} µs {rss:>7.0} MB",
                mode.name,
                rate / ceil,
                rate / serial,
                cpu
            );
        }
        let [w, r, n] = in_process_batch.map(|rates| median(&rates));
        println!();
        println!(
            "batch mode in process (the runner, 6 partitions on the worker threads, no Kafka): billing.wasm {w:.0} msg/s, native {n:.0} msg/s, wasm/native {:.2}; with --reuse-instance {r:.0} msg/s, {:.2}",
            w / n,
            r / n
        );
        let (plain, savepoints) = savepoint_cost(&db, messages).await;
        println!(
            "a savepoint per record (SAVEPOINT + RELEASE around each invoice, batches of 100, 6 connections): {savepoints:.0} vs {plain:.0} msg/s without, ratio {:.2}",
            savepoints / plain
        );
        println!("instantiate (store + instance of billing.wasm) p50: {:.1} µs", instantiate_p50(&wasm).await);
        let calls = 5_000;
        settle(&db).await;
        let (_, wasm_call) = handler_call_cost(&db, &*wasm, calls, "call-w").await;
        let (_, native_call) = handler_call_cost(&db, &*native, calls, "call-n").await;
        println!(
            "guest call overhead: billing.wasm {wasm_call:.1} µs of host CPU per message against native {native_call:.1} µs, {:.1} µs more ({calls} messages one after another on one transaction: fresh instance, call, the db import, teardown)",
            wasm_call - native_call
        );
        println!("statement check (libpg_query), uncached: {:.1} µs per statement; verdicts are cached per SQL text", statement_check_cost());
        println!("hot swap: compiling + checking + instantiating a new billing.wasm takes {:.0} ms (median of 5)", load_and_check_ms(&runtime).await);
        let cache = tempfile::tempdir().expect("cache dir");
        let cached = Runtime::with_compile_cache(SandboxLimits::default(), Some(cache.path())).expect("runtime");
        let (cold, warm) = (load_and_check_ms_once(&cached).await, load_and_check_ms(&cached).await);
        println!("with the compile cache: the first load {cold:.0} ms, loads from the cache {warm:.0} ms (median of 5)");
    });
}

/// The release binary with billing.wasm in `mode` ([`end_to_end`]).
async fn in_mode(db: &TestDb, broker: &LocalBroker, mode: &Mode, messages: usize) -> Round {
    let (batch_max, concurrency) = (mode.batch_max.to_string(), mode.concurrency.to_string());
    let mut flags = vec!["--batch-max", &batch_max, "--concurrency", &concurrency];
    if mode.reuse_instance {
        flags.push("--reuse-instance");
    }
    let run = Run {
        plugin: "billing",
        flags: &flags,
        relayed: false,
        requested: false,
        knobs: None,
        group: None,
        timestamp_ms: Some(bench::in_hour(0, bench::MID_HOUR)),
        partitions: None,
    };
    end_to_end(db, broker, &run, messages).await
}

/// Records per second of billing's INSERT in batches of 100 on 6 connections,
/// without and with a savepoint around each record: what a batch would pay on
/// every record to survive a failure without replaying the records before it.
async fn savepoint_cost(db: &TestDb, messages: usize) -> (f64, f64) {
    let mut rates = [0.0; 2];
    for (n, with_savepoints) in [false, true].into_iter().enumerate() {
        let started = Instant::now();
        let lanes = (0..PARTITIONS).map(|p| async move {
            for chunk in 0..messages / PARTITIONS as usize / 100 {
                let mut tx = db.pool.begin().await.expect("begin");
                for i in 0..100 {
                    if with_savepoints {
                        sqlx::query("SAVEPOINT record").execute(&mut *tx).await.expect("savepoint");
                    }
                    sqlx::query("INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ($1, 1, $1, 'sp')")
                        .bind(format!("sp{n}-{p}-{chunk}-{i}"))
                        .execute(&mut *tx)
                        .await
                        .expect("insert");
                    if with_savepoints {
                        sqlx::query("RELEASE SAVEPOINT record").execute(&mut *tx).await.expect("release");
                    }
                }
                tx.commit().await.expect("commit");
            }
        });
        futures_util::future::join_all(lanes).await;
        let total = messages / PARTITIONS as usize / 100 * 100 * PARTITIONS as usize;
        rates[n] = total as f64 / started.elapsed().as_secs_f64();
    }
    (rates[0], rates[1])
}

/// Median µs to give one message a fresh store and instance.
async fn instantiate_p50(plugin: &Plugin) -> f64 {
    let mut times = Vec::new();
    for _ in 0..501 {
        let started = Instant::now();
        plugin.check_instantiation().await.expect("instantiates");
        times.push(started.elapsed().as_secs_f64() * 1e6);
    }
    median(&times)
}

/// One handler called for `messages` orders one after another on one
/// transaction (rolled back), no runner, no concurrency: records per second and
/// the process's CPU µs per record.
async fn handler_call_cost<H: Handler>(
    db: &TestDb,
    handler: &H,
    messages: usize,
    tag: &str,
) -> (f64, f64) {
    let orders: Vec<_> = (0..messages)
        .map(|i| order(&format!("{tag}-{i}"), 1))
        .collect();
    let mut tx = db.pool.begin().await.expect("begin");
    let (started, cpu) = (Instant::now(), own_cpu_seconds());
    for message in &orders {
        let (back, handled) = handler.handle(message, tx).await;
        handled.expect("handled");
        tx = back;
    }
    let cpu = (own_cpu_seconds() - cpu) * 1e6 / messages as f64;
    let rate = messages as f64 / started.elapsed().as_secs_f64();
    tx.rollback().await.expect("rollback");
    (rate, cpu)
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
        times.push(load_and_check_ms_once(runtime).await);
    }
    median(&times)
}

/// Ms of one load the way a hot swap does.
async fn load_and_check_ms_once(runtime: &Runtime) -> f64 {
    let started = Instant::now();
    let plugin = Plugin::load(runtime, &plugin("billing")).expect("billing.wasm");
    plugin.check_instantiation().await.expect("instantiates");
    started.elapsed().as_secs_f64() * 1e3
}
