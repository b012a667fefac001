//! What the benchmarks share: the runner they drive in process, and medians.

pub mod e2e;

use std::sync::Arc;
use std::time::Instant;

use inbox_host::embedded::{Durability, LocalBroker};
use inbox_host::inbox::{Handler, Message, Outcome, Runner, RunnerSettings};

use crate::{order, TestDb};

/// Partitions every benchmark spreads its records over.
pub const PARTITIONS: i32 = 6;

/// The runner on a pool set up as the binary's (`inbox::pool_options`: no
/// ping before each acquire, unlike the tests' pool), its connections opened
/// and its group's partitions prepared before any timing starts, so the
/// ceiling runs on the binary's terms.
pub async fn runner(db: &TestDb, group: &str) -> Runner {
    let pool = inbox_host::inbox::pool_options(8)
        .connect(&db.url)
        .await
        .expect("the bench's pool");
    let opened = futures_util::future::try_join_all((0..8).map(|_| pool.acquire()))
        .await
        .expect("opening the pool's connections");
    drop(opened);
    // The binary prepares its group's partitions before it joins; so does the
    // ceiling, before any timing.
    inbox_host::inbox::prepare_partitions(&pool, group, inbox_host::inbox::PREPARED_BEHIND)
        .await
        .expect("the group's partitions");
    Runner::new(pool, RunnerSettings::defaults(group, "bench"))
}

/// Records per second through the runner, no Kafka: `messages` orders over
/// 6 partitions as tasks side by side, in batches of `batch_max`, at most
/// `concurrency` batches at once. `tag` keeps each round's message ids apart.
pub async fn in_process<H: Handler + Send + Sync + 'static>(
    db: &TestDb,
    handler: &Arc<H>,
    batch_max: usize,
    concurrency: usize,
    messages: usize,
    tag: &str,
) -> f64 {
    let runner = runner(db, tag).await;
    let permits = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let per_partition = messages / PARTITIONS as usize;
    let started = Instant::now();
    let lanes: Vec<_> = (0..PARTITIONS)
        .map(|p| {
            let (runner, permits, handler) = (runner.clone(), permits.clone(), handler.clone());
            // Stamped as the end-to-end side's records are.
            let stamp = in_hour(0, MID_HOUR);
            let orders: Vec<Message> = (0..per_partition)
                .map(|i| Message {
                    timestamp_ms: Some(stamp),
                    ..order(&format!("{tag}-{p}-{i}"), 1)
                })
                .collect();
            tokio::spawn(async move {
                for chunk in orders.chunks(batch_max) {
                    let _permit = permits.acquire().await.expect("permit");
                    let batch: Vec<&Message> = chunk.iter().collect();
                    let outcomes = runner.process_batch(&batch, &*handler).await;
                    assert!(
                        outcomes.iter().all(|o| *o == Outcome::Processed),
                        "{outcomes:?}"
                    );
                }
            })
        })
        .collect();
    for lane in lanes {
        lane.await.expect("lane");
    }
    (per_partition * PARTITIONS as usize) as f64 / started.elapsed().as_secs_f64()
}

/// Brings PostgreSQL to the same state before every measured run: dirty pages
/// written out and the tables the previous run grew vacuumed, so a checkpoint or
/// an autovacuum it left behind does not land in the next run (whichever mode
/// that is).
pub async fn settle(db: &TestDb) {
    for statement in [
        "CHECKPOINT",
        "VACUUM (ANALYZE) inbox_host.inbox, inbox_host.outbox, invoices",
    ] {
        sqlx::query(statement)
            .execute(&db.pool)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
}

/// Records stamped here in their hour (UTC) take a claim's common path: their
/// ten-minute resend windows stay inside the hour (docs/semantics.md). The
/// benchmarks stamp their records here, so a run's figures do not depend on the
/// minute it started.
pub const MID_HOUR: i64 = 30;

/// The time (ms since the epoch) `minute` past the start of the hour
/// `hours_back` hours before the current one (UTC).
pub fn in_hour(hours_back: i64, minute: i64) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    now - now % HOUR_MS - hours_back * HOUR_MS + minute * 60_000
}

const HOUR_MS: i64 = 3_600_000;

/// Records per round: `BENCH_MESSAGES`, else the benchmark's default.
pub fn messages_per_round(default: usize) -> usize {
    std::env::var("BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The runtime a benchmark's `main` runs on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A PostgreSQL with fsync and synchronous commit on, and a local broker.
pub async fn production_stage() -> (TestDb, LocalBroker) {
    let db = TestDb::start_with(Durability::Production).await;
    (db, LocalBroker::start().expect("broker"))
}

pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
