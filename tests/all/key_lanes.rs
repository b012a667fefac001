//! Key lanes (`--key-lanes`): the release of a partition's records to lanes by
//! key, through the real binary, broker and PostgreSQL with sql-runner.wasm.
//! Each record inserts its (key, seq) into `effects` in its own transaction, so
//! the table says which effects happened, how often and in which order.

use std::collections::HashMap;
use std::time::Duration;

use inbox_host::app::lane_of;
use inbox_host::kafka::OutgoingRecord;
use inbox_host_tests::host::{self, Host};
use inbox_host_tests::stage::Stage;
use inbox_host_tests::{plugin, wait_until};

const LONG: Duration = Duration::from_secs(120);
const KEYS: usize = 20;

async fn effects_table(stage: &Stage) {
    stage
        .db
        .execute(
            "CREATE TABLE effects (at bigserial PRIMARY KEY, key text NOT NULL, seq int NOT NULL,
                                   tx bigint DEFAULT txid_current(), began timestamptz DEFAULT now(),
                                   wrote timestamptz DEFAULT clock_timestamp());
             CREATE TABLE gate (open int);
             GRANT INSERT ON effects TO inbox_guest; GRANT SELECT ON gate TO inbox_guest;
             GRANT USAGE ON SEQUENCE effects_at_seq TO inbox_guest;",
        )
        .await;
}

/// Record `seq` of `key`, on `partition`: inserts its effect after counting
/// `work` thousand rows (the host refuses `pg_sleep` in a handler).
fn keyed(stage: &Stage, partition: i32, key: &str, seq: usize, work: u32) -> OutgoingRecord {
    let sql = format!(
        "INSERT INTO effects (key, seq) SELECT '{key}', {seq}
         FROM (SELECT count(*) FROM generate_series(1, {work} * 1000)) AS w"
    );
    OutgoingRecord {
        key: Some(key.as_bytes().to_vec()),
        ..stage.record(&format!("{key}-{seq}"), Some(partition), sql)
    }
}

/// `n` records over [`KEYS`] keys, round robin, each key's numbered from 0.
fn spread(stage: &Stage, partitions: i32, n: usize, work: u32) -> Vec<OutgoingRecord> {
    (0..n)
        .map(|i| {
            let key = format!("key-{}", i % KEYS);
            // A key's records all go to one partition (KEYS is even).
            let partition = (i % KEYS) as i32 % partitions;
            keyed(stage, partition, &key, i / KEYS, work)
        })
        .collect()
}

async fn effect_count(stage: &Stage) -> i64 {
    stage.db.count("SELECT count(*) FROM effects").await
}

/// Waits until `n` effects happened and the group's offsets over the topic's
/// `partitions` are committed past all `n` records.
async fn all_done(stage: &Stage, partitions: i32, n: i64) {
    wait_until(&format!("all {n} effects"), LONG, || async {
        effect_count(stage).await >= n
    })
    .await;
    wait_until("the offsets committed past every record", LONG, || async {
        stage.committed_total(partitions).await == n
    })
    .await;
}

/// Asserts each of the `n` records' effects happened exactly once, and each
/// key's in the order of its records.
async fn once_each_in_key_order(stage: &Stage, n: usize) {
    let rows: Vec<(String, i32)> = sqlx::query_as("SELECT key, seq FROM effects ORDER BY at")
        .fetch_all(&stage.db.pool)
        .await
        .expect("effects");
    assert_eq!(rows.len(), n, "one effect per record, none lost or doubled");
    let mut next: HashMap<String, i32> = HashMap::new();
    for (key, seq) in rows {
        let expected = next.entry(key.clone()).or_insert(0);
        assert_eq!(seq, *expected, "{key}'s effects out of order");
        *expected += 1;
    }
    assert_eq!(next.len(), KEYS);
}

fn lanes_host(stage: &Stage, lanes: &str, extra: &[&str]) -> Host {
    let args = [&["--key-lanes", lanes, "--batch-max", "5"][..], extra].concat();
    stage.spawn_host(&plugin("sql-runner"), &args)
}

#[tokio::test(flavor = "multi_thread")]
async fn with_4_lanes_on_one_partition_each_keys_effects_happen_once_and_in_offset_order() {
    let stage = Stage::new(1).await;
    effects_table(&stage).await;
    stage.produce(spread(&stage, 1, 400, 50)).await;
    let host = lanes_host(&stage, "4", &[]);
    all_done(&stage, 1, 400).await;
    once_each_in_key_order(&stage, 400).await;
    // The lanes ran side by side: two transactions were open at once (each
    // began before the other wrote).
    let overlapping = stage
        .db
        .count(
            "SELECT count(*) FROM effects a JOIN effects b
               ON a.tx < b.tx AND a.began < b.wrote AND b.began < a.wrote",
        )
        .await;
    assert!(
        overlapping > 0,
        "no two lanes' transactions were open at once"
    );
    drop(host);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_record_holds_only_its_keys_lane_and_the_stored_offset_never_passes_it() {
    let stage = Stage::new(1).await;
    effects_table(&stage).await;
    let lanes = 4;
    let stuck_lane = lane_of(Some(b"stuck"), 0, lanes);
    // Offset 0 fails (a division by zero) until `gate` holds a row.
    let mut records = vec![OutgoingRecord {
        key: Some(b"stuck".to_vec()),
        ..stage.record(
            "stuck-0",
            Some(0),
            "INSERT INTO effects (key, seq) VALUES ('stuck', 0 / (SELECT count(*) FROM gate)::int)",
        )
    }];
    records.extend(spread(&stage, 1, 200, 0));
    stage.produce(records).await;
    let stuck_keys: Vec<String> = (0..KEYS)
        .map(|k| format!("key-{k}"))
        .filter(|key| lane_of(Some(key.as_bytes()), 0, lanes) == stuck_lane)
        .collect();
    let free = 200 - (200 / KEYS * stuck_keys.len()) as i64;
    assert!(
        free > 0 && free < 200,
        "keys land on the stuck lane and on others"
    );
    let host = lanes_host(&stage, "4", &["--max-fatal-attempts", "1000000"]);
    let keys = stuck_keys.join("','");
    let others = format!("SELECT count(*) FROM effects WHERE key NOT IN ('{keys}')");
    wait_until("every record of the other lanes handled", LONG, || async {
        stage.db.count(&others).await >= free
    })
    .await;
    let behind = stage
        .db
        .count(&format!(
            "SELECT count(*) FROM effects WHERE key IN ('stuck', '{keys}')"
        ))
        .await;
    assert_eq!(
        behind, 0,
        "a record on the stuck lane ran past the failing one"
    );
    let committed = stage.committed(0).await;
    assert!(
        committed.is_none_or(|c| c == 0),
        "the stored offset passed the failing record: {committed:?}"
    );
    let lane_label = format!("lane=\"{stuck_lane}\"");
    wait_until(
        "the stuck lane's waiting records on /metrics",
        LONG,
        || async {
            host.metric_sum_of("inbox_host_lane_waiting_records", &[&lane_label])
                .is_some_and(|w| w >= 1.0)
        },
    )
    .await;
    assert!(
        host.metric_sum_of(
            "inbox_host_lane_watermark_lag_records",
            &["partition=\"0\""]
        )
        .is_some_and(|ahead| ahead >= 1.0 + free as f64),
        "the watermark lag counts the records past the held one"
    );

    stage.db.execute("INSERT INTO gate VALUES (1)").await;
    all_done(&stage, 1, 201).await;
    assert_eq!(effect_count(&stage).await, 201);
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_mid_run_with_lanes_loses_and_doubles_no_effect_and_keeps_each_keys_order() {
    let stage = Stage::new(1).await;
    effects_table(&stage).await;
    stage.produce(spread(&stage, 1, 600, 50)).await;
    let mut first = lanes_host(&stage, "8", &[]);
    wait_until("a third of the effects", LONG, || async {
        effect_count(&stage).await >= 200
    })
    .await;
    first.kill_hard();
    let _second = lanes_host(&stage, "8", &[]);
    all_done(&stage, 1, 600).await;
    once_each_in_key_order(&stage, 600).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rebalance_with_lanes_drains_them_and_the_new_owner_goes_on_in_key_order() {
    let stage = Stage::new(2).await;
    effects_table(&stage).await;
    let records = spread(&stage, 2, 800, 200);
    let (early, late) = records.split_at(400);
    stage.produce(early.to_vec()).await;
    let a = lanes_host(&stage, "4", &[]);
    wait_until("some effects on the first host", LONG, || async {
        effect_count(&stage).await >= 100
    })
    .await;
    let b = lanes_host(&stage, "4", &[]);
    wait_until("the second host assigned a partition", LONG, || async {
        b.metric("inbox_host_assigned_partitions")
            .is_some_and(|n| n >= 1.0)
    })
    .await;
    stage.produce(late.to_vec()).await;
    all_done(&stage, 2, 800).await;
    once_each_in_key_order(&stage, 800).await;
    let hosts = stage
        .db
        .count("SELECT count(DISTINCT worker_id) FROM inbox_host.inbox")
        .await;
    assert_eq!(hosts, 2, "the second host took a partition over");
    drop((a, b));
}

#[test]
fn lanes_refuse_at_most_once_and_out_of_range_counts_with_the_flag() {
    for (args, said) in [
        (
            &["--key-lanes", "4", "--strategy", "at-most-once"][..],
            "--key-lanes above 1 cannot be combined with --strategy at-most-once",
        ),
        (&["--key-lanes", "0"][..], "--key-lanes must be at least 1"),
        (
            &["--key-lanes", "8", "--lane-lookahead", "4"][..],
            "--lane-lookahead must be at least --key-lanes",
        ),
    ] {
        host::refuses(&[&host::MAIN_JOB[..], args].concat(), said);
    }
}
