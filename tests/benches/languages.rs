//! Billing in Rust, Python and JavaScript, in one run: how long each component
//! takes to load cold (compiled) and from the compile cache, and what each costs
//! per message in batch mode through the runner (no Kafka), with a fresh
//! instance per message (the default) and with `--reuse-instance`. The
//! overhead column is the extra time per message over Rust at the same
//! setting (1/rate − 1/rate of Rust). Each round starts with another language
//! and swaps fresh and reused; every run on a settled database; medians.
//!
//! Part of `cargo bench -p inbox-host-tests` (`scripts/bench`); the Python and
//! JavaScript plugins are built by `inbox-host build` (the release binary).
//! BENCH_LANGUAGE_MESSAGES=n sets the records per round (default 3,000).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use inbox_host::embedded::Durability;
use inbox_host::plugin::{Plugin, Runtime, SandboxLimits};
use inbox_host_tests::bench::{self, in_process, median, settle};
use inbox_host_tests::{guest_plugin, plugin, TestDb};

const ROUNDS: usize = 3;
const BATCH_MAX: usize = 100;
const CONCURRENCY: usize = 8;

struct Language {
    name: &'static str,
    path: PathBuf,
}

fn main() {
    let messages: usize = std::env::var("BENCH_LANGUAGE_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000);
    let languages = [
        Language {
            name: "Rust",
            path: plugin("billing"),
        },
        Language {
            name: "Python",
            path: guest_plugin("billing-py"),
        },
        Language {
            name: "JavaScript",
            path: guest_plugin("billing-js"),
        },
    ];
    bench::runtime().block_on(async move {
        println!("billing per language: batch mode in process (batches of {BATCH_MAX}, {CONCURRENCY} at once, 6 partitions), {messages} records x {ROUNDS} rounds, medians\n");
        let db = TestDb::start_with(Durability::Production).await;
        let mut loads = Vec::new();
        let (mut fresh, mut reused) = (Vec::new(), Vec::new());
        for language in &languages {
            let cache = tempfile::tempdir().expect("cache dir");
            let cold = load_ms(&language.path, cache.path(), false).await.0;
            let mut cached = Vec::new();
            for _ in 0..3 {
                cached.push(load_ms(&language.path, cache.path(), false).await.0);
            }
            let cached = median(&cached);
            loads.push((cold, cached));
            let size = std::fs::metadata(&language.path).expect("component").len();
            eprintln!("{}: {:.1} MB, loaded cold in {cold:.0} ms", language.name, size as f64 / 1e6);
            fresh.push((Arc::new(load_ms(&language.path, cache.path(), false).await.1), Vec::new()));
            reused.push((Arc::new(load_ms(&language.path, cache.path(), true).await.1), Vec::new()));
        }
        for round in 0..ROUNDS {
            // Each round starts with another language and swaps fresh and
            // reused, every run on a settled database, so a slow stretch of
            // the machine or a checkpoint does not land on one side.
            for l in (0..languages.len()).map(|l| (l + round) % languages.len()) {
                for reuse in [round % 2 == 1, round % 2 == 0] {
                    settle(&db).await;
                    let (slot, tag) = if reuse {
                        (&mut reused[l], format!("r{round}-{l}"))
                    } else {
                        (&mut fresh[l], format!("f{round}-{l}"))
                    };
                    let rate = in_process(&db, &slot.0, BATCH_MAX, CONCURRENCY, messages, &tag).await;
                    slot.1.push(rate);
                }
            }
            eprintln!("round {} of {ROUNDS} done", round + 1);
        }
        println!(
            "{:<11} {:>8} {:>10} {:>11} {:>12} {:>14} {:>12} {:>14}",
            "language", "size", "cold load", "cached load", "fresh msg/s", "fresh overhead", "reuse msg/s", "reuse overhead"
        );
        let rust = (median(&fresh[0].1), median(&reused[0].1));
        for (l, language) in languages.iter().enumerate() {
            let size = std::fs::metadata(&language.path).expect("component").len() as f64 / 1e6;
            let (f, r) = (median(&fresh[l].1), median(&reused[l].1));
            println!(
                "{:<11} {size:>5.1} MB {:>8.1} s {:>8.0} ms {f:>12.0} {:>11.3} ms {r:>12.0} {:>11.3} ms",
                language.name,
                loads[l].0 / 1e3,
                loads[l].1,
                1e3 / f - 1e3 / rust.0,
                1e3 / r - 1e3 / rust.1,
            );
        }
    });
}

/// Loads and checks `path` with the compile cache in `cache`: ms taken and the plugin.
async fn load_ms(path: &Path, cache: &Path, reuse_instance: bool) -> (f64, Plugin) {
    let limits = SandboxLimits {
        reuse_instance,
        ..SandboxLimits::default()
    };
    let runtime = Runtime::with_compile_cache(limits, Some(cache)).expect("runtime");
    let started = Instant::now();
    let plugin = Plugin::load(&runtime, path).expect("plugin loads");
    plugin.check_instantiation().await.expect("instantiates");
    (started.elapsed().as_secs_f64() * 1e3, plugin)
}
