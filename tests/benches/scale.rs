//! The inbox at scale, in one run (docs/sizing.md, docs/performance.md): the
//! release binary in batch mode (the defaults) with billing.wasm, one group,
//! against an inbox that already holds 0, 10 million and 50 million rows of
//! that group, their records' timestamps spread over the past seven days (an
//! inbox that took them in over a week); then at 50 million while the oldest
//! partitions are dropped, one a second; then the worst case, an hour that
//! holds 10 million rows being written to.
//! Each row's records are stamped in an hour of their own before the run
//! began, so a row writes to a partition holding only what the fill put there
//! (1/168 of the inbox, as the current hour would at that rate), never the
//! rows of earlier rows. They are stamped in the middle of that hour (a claim's
//! common path); the empty inbox and the largest are also measured with
//! records stamped a minute past the hour, whose claims take the slow path (a
//! lock per id and a look into the previous hour), as a third of each hour's
//! records do with the default resend window. Last, the worst case again with
//! `wal_compression = lz4` (docs/sizing.md). Throughput and WAL bytes per
//! message, medians of the rounds, as ratios to the empty inbox.
//!
//! `scripts/bench --bench scale` (builds the release binary first). It writes
//! about 15 GB to a temporary cluster. BENCH_MESSAGES=n sets the records per
//! round (default 100,000); BENCH_SCALE_ROWS=a,b the two inbox sizes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inbox_host::embedded::LocalBroker;
use inbox_host_tests::bench::e2e::{end_to_end, Run};
use inbox_host_tests::bench::{self, median};
use inbox_host_tests::TestDb;

const ROUNDS: usize = 3;
const GROUP: &str = "scale";
/// Rows inserted per statement while filling.
const FILL_CHUNK: i64 = 1_000_000;
const WEEK_SECS: f64 = 7.0 * 86_400.0;
const HOUR_MS: i64 = 3_600_000;
/// A minute past the hour: the records' resend windows reach the previous hour.
const NEAR_THE_HOUR: i64 = 1;

struct Measured {
    per_second: f64,
    wal_per_message: f64,
}

fn main() {
    let messages = std::env::var("BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let sizes: Vec<i64> = std::env::var("BENCH_SCALE_ROWS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000_000, 50_000_000]);
    bench::runtime().block_on(async move {
        let (db, broker) = bench::production_stage().await;
        println!("inbox-host at scale: group {GROUP}, {messages} records x {ROUNDS} rounds per row, medians");
        println!("PostgreSQL with fsync and synchronous commit on, its default settings; the host is the release binary\n");
        db.execute(&format!(
            "SELECT inbox_host.inbox_prepare('{GROUP}', now() - interval '7 days 1 hour', now() + interval '1 day')"
        ))
        .await;
        // Each row's records go to an hour of their own, before the run began,
        // which holds what the fill put there: the share of an inbox that took
        // its rows in evenly over a week (1/168), as the hour being written
        // would at that rate. Mid-hour unless measuring the slow path.
        let run_began = bench::in_hour(0, 0);
        let mut hours_back = 0;
        let mut next_hour = |minute: i64| {
            hours_back += 1;
            run_began - hours_back * HOUR_MS + minute * 60_000
        };
        let mut table = Vec::new();
        let empty = rounds(&db, &broker, messages, next_hour(bench::MID_HOUR), None).await;
        table.push(("empty".to_string(), empty.per_second, empty.wal_per_message, String::new()));
        let m = rounds(&db, &broker, messages, next_hour(NEAR_THE_HOUR), None).await;
        table.push(("empty, a minute past the hour".to_string(), m.per_second, m.wal_per_message, String::new()));
        let mut filled = 0;
        for &size in &sizes {
            fill(&db, filled, size, Spread::PastWeek).await;
            filled = size;
            let m = rounds(&db, &broker, messages, next_hour(bench::MID_HOUR), None).await;
            table.push((format!("{} rows over the past week", millions(size)), m.per_second, m.wal_per_message, String::new()));
        }
        let m = rounds(&db, &broker, messages, next_hour(NEAR_THE_HOUR), None).await;
        table.push((format!("{}, a minute past the hour", millions(filled)), m.per_second, m.wal_per_message, String::new()));
        let mut drops = Vec::new();
        let m = rounds(&db, &broker, messages, next_hour(bench::MID_HOUR), Some(&mut drops)).await;
        let dropped = format!(
            "{} partitions dropped, median {:.0} ms, longest {:.0} ms",
            drops.len(),
            median(&drops),
            drops.iter().copied().fold(0.0, f64::max)
        );
        table.push(("the same, dropping old partitions".to_string(), m.per_second, m.wal_per_message, dropped));
        let crowded = next_hour(bench::MID_HOUR);
        fill(&db, filled, filled + 10_000_000, Spread::Hour(crowded - bench::MID_HOUR * 60_000)).await;
        let m = rounds(&db, &broker, messages, crowded, None).await;
        table.push(("+ 10 M rows in the hour written".to_string(), m.per_second, m.wal_per_message, String::new()));
        // docs/sizing.md's first setting, on the worst case: full-page images
        // compressed (the host's sessions pick it up on reload).
        db.execute("ALTER SYSTEM SET wal_compression = 'lz4'").await;
        db.execute("SELECT pg_reload_conf()").await;
        let m = rounds(&db, &broker, messages, crowded, None).await;
        db.execute("ALTER SYSTEM RESET wal_compression").await;
        db.execute("SELECT pg_reload_conf()").await;
        table.push(("the same, wal_compression = lz4".to_string(), m.per_second, m.wal_per_message, String::new()));

        println!("{:<40} {:>9} {:>7} {:>10} {:>7}", "inbox before the rounds", "msg/s", "x empty", "WAL B/msg", "x empty");
        for (name, rate, wal, note) in &table {
            println!(
                "{name:<40} {rate:>9.0} {:>7.2} {wal:>10.0} {:>7.2}  {note}",
                rate / empty.per_second,
                wal / empty.wal_per_message
            );
        }
        let (heap, index): (f64, f64) = sqlx::query_as(
            "SELECT sum(pg_table_size(c.oid))::float8, sum(pg_indexes_size(c.oid))::float8
             FROM inbox_host.inbox_partitions p
             JOIN pg_class c ON c.relname = p.name AND c.relnamespace = 'inbox_host'::regnamespace
             WHERE p.consumer_group = $1",
        )
        .bind(GROUP)
        .fetch_one(&db.pool)
        .await
        .expect("sizes");
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM inbox_host.inbox WHERE consumer_group = $1")
            .bind(GROUP)
            .fetch_one(&db.pool)
            .await
            .expect("rows");
        println!(
            "\n{rows} rows: {:.0} bytes of table and {:.0} bytes of index per row",
            heap / rows as f64,
            index / rows as f64
        );
        println!("\ntargets: >= 0.90 x empty at 50 M rows, WAL <= 1.5 x, a partition dropped in < 1 s, >= 0.90 x while dropping");
    });
}

/// Where the filled rows' record timestamps fall.
#[derive(Clone, Copy)]
enum Spread {
    PastWeek,
    /// The hour starting at this time (ms since the epoch).
    Hour(i64),
}

/// Adds rows `from..to` of the group, then vacuums and checkpoints, so no
/// autovacuum or checkpoint of the fill lands in the rounds.
async fn fill(db: &TestDb, from: i64, to: i64, spread: Spread) {
    let started = Instant::now();
    // Within one hour, or back from now over a week.
    let hour_secs = match spread {
        Spread::PastWeek => None,
        Spread::Hour(ms) => Some(ms as f64 / 1e3),
    };
    let digest = format!("sha256:{}", "0".repeat(64));
    let mut at = from;
    while at < to {
        let end = (at + FILL_CHUNK).min(to);
        sqlx::query(&format!(
            "INSERT INTO inbox_host.inbox
                 (message_id, consumer_group, worker_id, plugin_digest, topic, kafka_partition, kafka_offset, record_at, received_at)
             SELECT gen_random_uuid()::text, '{GROUP}', 'fill', $3, 'orders', (i % 6)::int, i, t, t
             FROM (SELECT i, coalesce(to_timestamp($4) + random() * interval '1 hour',
                                      now() - random() * make_interval(secs => $5)) AS t
                     FROM generate_series($1::bigint, $2::bigint - 1) AS i) AS rows"
        ))
        .bind(at)
        .bind(end)
        .bind(&digest)
        .bind(hour_secs)
        .bind(WEEK_SECS)
        .execute(&db.pool)
        .await
        .expect("fill");
        at = end;
    }
    for statement in ["VACUUM (ANALYZE) inbox_host.inbox", "CHECKPOINT"] {
        db.execute(statement).await;
    }
    eprintln!(
        "filled to {to} rows in {:.0} s",
        started.elapsed().as_secs_f64()
    );
}

/// "10 M", or "0.5 M" under a million.
fn millions(rows: i64) -> String {
    format!("{} M", rows as f64 / 1e6)
}

/// [`ROUNDS`] rounds on fresh topics, records stamped `stamp` (ms since the
/// epoch); with `drops`, a task drops the group's oldest partition every
/// second while each round runs and records how long each drop took (ms).
async fn rounds(
    db: &TestDb,
    broker: &LocalBroker,
    messages: usize,
    stamp: i64,
    mut drops: Option<&mut Vec<f64>>,
) -> Measured {
    let (mut rates, mut wal) = (Vec::new(), Vec::new());
    let run = Run {
        plugin: "billing",
        flags: &[],
        relayed: false,
        requested: false,
        knobs: None,
        group: Some(GROUP),
        timestamp_ms: Some(stamp),
        partitions: None,
    };
    for _ in 0..ROUNDS {
        db.execute("CHECKPOINT").await;
        let before = wal_lsn(db).await;
        let took = Arc::new(Mutex::new(Vec::new()));
        let dropping = drops
            .is_some()
            .then(|| tokio::spawn(drop_oldest_every_second(db.url.clone(), took.clone())));
        let round = end_to_end(db, broker, &run, messages).await;
        if let (Some(task), Some(drops)) = (dropping, drops.as_deref_mut()) {
            task.abort();
            drops.extend(took.lock().expect("drop times").iter());
        }
        let after = wal_lsn(db).await;
        rates.push(round.per_second);
        wal.push((after - before) / messages as f64);
    }
    Measured {
        per_second: median(&rates),
        wal_per_message: median(&wal),
    }
}

/// Drops the group's oldest hourly partition each second, as retention does
/// with a window that just moved past it, and notes each drop's time in ms,
/// until aborted or nothing older than three days is left (the host prepares
/// two days back).
async fn drop_oldest_every_second(url: String, took: Arc<Mutex<Vec<f64>>>) {
    let pool = sqlx::PgPool::connect(&url).await.expect("pool");
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let oldest: Option<(f64,)> = sqlx::query_as(
            "SELECT extract(epoch FROM min(to_at))::float8 FROM inbox_host.inbox_partitions
             WHERE consumer_group = $1 AND to_at IS NOT NULL HAVING min(to_at) < now() - interval '3 days'",
        )
        .bind(GROUP)
        .fetch_optional(&pool)
        .await
        .expect("oldest partition");
        let Some((to_at,)) = oldest else { return };
        // Both of retention's steps: the partition emptied, then dropped.
        let started = Instant::now();
        let mut dropped: Result<i32, sqlx::Error> = Ok(0);
        for _step in 0..2 {
            dropped =
                sqlx::query_scalar("SELECT inbox_host.inbox_drop_before($1, to_timestamp($2))")
                    .bind(GROUP)
                    .bind(to_at)
                    .fetch_one(&pool)
                    .await;
            if dropped.is_err() {
                break;
            }
        }
        let ms = started.elapsed().as_secs_f64() * 1e3;
        match dropped {
            Ok(n) if n > 0 => took.lock().expect("drop times").push(ms),
            Ok(_) => {}
            // What retention does too: give up after the function's lock
            // timeout and try again (counted as a drop that took that long).
            Err(e) => {
                eprintln!("a drop gave up after {ms:.0} ms: {e}");
                took.lock().expect("drop times").push(ms);
            }
        }
    }
}

async fn wal_lsn(db: &TestDb) -> f64 {
    sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8")
        .fetch_one(&db.pool)
        .await
        .expect("wal position")
}
