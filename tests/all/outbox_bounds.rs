//! The outbox against a hostile (or careless) plugin, through
//! `plugins/publish-hostile`: what the outbox cannot store, or a downstream
//! reader could mistake for the host's own headers, is refused at `publish`
//! and sets the record aside on its first attempt, so the partition moves on;
//! one record's publications are bounded in bytes, a batch holds about one
//! record's at a time, refusals are logged boundedly, and a run that ignored a
//! refused statement commits nothing it published.

use std::time::Duration;

use inbox_host_tests::stage::Stage;
use inbox_host_tests::{plugin, wait_until};

use crate::outbox::{outbox_emptied, outbox_rows, stage_with_output, topic_len, OUT};

const LONG: Duration = Duration::from_secs(120);

/// A record for publish-hostile: its id, and its knobs as JSON.
fn attack(stage: &Stage, id: &str, knobs: serde_json::Value) -> inbox_host::kafka::OutgoingRecord {
    stage.record(id, Some(0), knobs.to_string())
}

/// `(failure_kind, reason, attempts)` of the dead letter of `id`.
async fn dead_letter(stage: &Stage, id: &str) -> (String, String, i32) {
    sqlx::query_as(
        "SELECT failure_kind, reason, attempts FROM inbox_host.dead_letters WHERE message_id = $1",
    )
    .bind(id)
    .fetch_one(&stage.db.pool)
    .await
    .unwrap_or_else(|e| panic!("a dead letter for {id}: {e}"))
}

async fn invoices_of(stage: &Stage, id: &str) -> i64 {
    stage
        .db
        .count(&format!(
            "SELECT count(*) FROM invoices WHERE order_id = '{id}'"
        ))
        .await
}

/// Produces `poison`, then 50 harmless records behind it, runs the host with
/// `extra` flags until all are done, and checks that each poison record is a
/// dead letter of kind `publish-rule` set aside on its first attempt, with
/// nothing of it committed, while all 50 behind it were handled and published.
async fn poison_sets_aside_at_once(
    poison: Vec<(&str, serde_json::Value)>,
    extra: &[&str],
) -> Stage {
    let stage = stage_with_output().await;
    let mut records: Vec<_> = poison
        .iter()
        .map(|(id, knobs)| attack(&stage, id, knobs.clone()))
        .collect();
    records.extend((0..50).map(|i| attack(&stage, &format!("fine-{i}"), serde_json::json!({}))));
    let total = records.len() as i64;
    stage.produce(records).await;
    let mut args = vec!["--publish-topic", OUT];
    args.extend_from_slice(extra);
    let _host = stage.spawn_host(&plugin("publish-hostile"), &args);
    wait_until("every record done and committed", LONG, || async {
        stage.committed(0).await == Some(total)
    })
    .await;
    for (id, _) in &poison {
        let (kind, reason, attempts) = dead_letter(&stage, id).await;
        assert_eq!(kind, "publish-rule", "{id}: {reason}");
        assert_eq!(attempts, 1, "{id} set aside on its first attempt: {reason}");
        assert_eq!(invoices_of(&stage, id).await, 0, "{id} committed nothing");
    }
    assert_eq!(
        stage
            .db
            .count("SELECT count(*) FROM invoices WHERE order_id LIKE 'fine-%'")
            .await,
        50
    );
    outbox_emptied(&stage).await;
    assert_eq!(
        topic_len(&stage, OUT).await,
        50,
        "only the 50 harmless records published"
    );
    stage
}

#[tokio::test(flavor = "multi_thread")]
async fn a_header_the_outbox_cannot_store_or_a_reader_could_mistake_is_refused_at_publish_and_the_partition_moves_on(
) {
    let header = |name: &str, value: &str| serde_json::json!({ "headers": [[name, value]] });
    let poison = vec![
        ("nul-value", header("event-type", "in\u{0}voice")),
        ("nul-name", header("event\u{0}type", "invoice")),
        ("upper-case", header("Message_Id", "forged")),
        ("all-caps", header("MESSAGE_ID", "forged")),
        ("trailing-space", header("message_id ", "forged")),
        ("hyphenated", header("message-id", "forged")),
        ("trace", header("Traceparent", "00-forged")),
        ("caused-by", header("Inbox_Caused_By", "forged")),
        ("dead-letter", header("kafka_dlt-original-topic", "orders")),
    ];
    let stage = poison_sets_aside_at_once(poison.clone(), &[]).await;
    for (id, knobs) in &poison {
        let (_, reason, _) = dead_letter(&stage, id).await;
        let name = knobs["headers"][0][0].as_str().expect("name");
        assert!(
            reason.contains("IH013"),
            "{id}: the guest saw IH013: {reason}"
        );
        let shown = format!("{name:?}");
        assert!(
            reason.contains(&shown),
            "{id}: the reason names the header {shown}: {reason}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_outbox_insert_that_a_retry_cannot_fix_sets_the_record_aside_instead_of_holding_the_partition(
) {
    // A check an operator added to the table: PostgreSQL refuses the host's own
    // insert the same way every time, as it refused a NUL before the plugin
    // side caught it.
    let stage = stage_with_output().await;
    sqlx::query(
        "ALTER TABLE inbox_host.outbox ADD CONSTRAINT outbox_small_payloads
         CHECK (octet_length(payload) < 1000)",
    )
    .execute(&stage.db.pool)
    .await
    .expect("constraint");
    let mut records = vec![attack(
        &stage,
        "too-big",
        serde_json::json!({ "value_bytes": 2000 }),
    )];
    records.extend((0..5).map(|i| attack(&stage, &format!("fine-{i}"), serde_json::json!({}))));
    stage.produce(records).await;
    let _host = stage.spawn_host(&plugin("publish-hostile"), &["--publish-topic", OUT]);
    wait_until("every record done and committed", LONG, || async {
        stage.committed(0).await == Some(6)
    })
    .await;
    let (kind, reason, attempts) = dead_letter(&stage, "too-big").await;
    assert_eq!((kind.as_str(), attempts), ("publish-rule", 1), "{reason}");
    assert!(reason.contains("outbox_small_payloads"), "{reason}");
    assert_eq!(invoices_of(&stage, "too-big").await, 0);
    assert_eq!(
        stage
            .db
            .count("SELECT count(*) FROM invoices WHERE order_id LIKE 'fine-%'")
            .await,
        5
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn publications_past_max_publish_bytes_are_refused_with_ih012_at_the_call_that_crosses_it() {
    // Each message: 1,000 bytes of value and a key of 9 ("too-many-"), so the
    // fourth call brings the record to 4,036 bytes, past 3,500.
    let stage = poison_sets_aside_at_once(
        vec![(
            "too-much",
            serde_json::json!({ "copies": 5, "value_bytes": 1000 }),
        )],
        &["--max-publish-bytes", "3500"],
    )
    .await;
    let (_, reason, _) = dead_letter(&stage, "too-much").await;
    assert!(reason.contains("IH012"), "{reason}");
    assert!(
        reason.contains("to 4032 bytes, over --max-publish-bytes (3500)"),
        "refused at the fourth call: {reason}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hundred_thousand_refused_publishes_log_a_bounded_number_of_lines() {
    let stage = stage_with_output().await;
    stage
        .produce(vec![attack(
            &stage,
            "spam",
            serde_json::json!({ "copies": 100_000, "ignore_refusals": true }),
        )])
        .await;
    let host = stage.spawn_host(
        &plugin("publish-hostile"),
        &["--publish-topic", OUT, "--guest-deadline-ms", "120000"],
    );
    wait_until("the record set aside", LONG, || async {
        stage.committed(0).await == Some(1)
    })
    .await;
    let (kind, reason, _) = dead_letter(&stage, "spam").await;
    assert_eq!(
        kind, "publish-rule",
        "the ignored refusal failed the run: {reason}"
    );
    assert_eq!(outbox_rows(&stage).await, 0);
    let log = host.log();
    let refusal_lines = log
        .lines()
        .filter(|l| l.contains("guest publication refused"))
        .count();
    assert!(refusal_lines <= 4, "{refusal_lines} lines of refusals");
    assert!(
        log.contains("guest publication refused: 99897 more refusals in this message not logged"),
        "the rest counted once"
    );
    assert!(log.len() < 64 << 10, "{} bytes of log", log.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_ignores_a_refused_statement_and_publishes_commits_nothing() {
    let stage = stage_with_output().await;
    stage
        .produce(vec![attack(
            &stage,
            "swallowed",
            serde_json::json!({ "refused_statement_first": true }),
        )])
        .await;
    let _host = stage.spawn_host(&plugin("publish-hostile"), &["--publish-topic", OUT]);
    wait_until("the record set aside", LONG, || async {
        stage.committed(0).await == Some(1)
    })
    .await;
    let (kind, reason, _) = dead_letter(&stage, "swallowed").await;
    assert_eq!(kind, "db-rule", "{reason}");
    assert!(reason.contains("IH001"), "{reason}");
    assert_eq!(invoices_of(&stage, "swallowed").await, 0);
    assert_eq!(outbox_rows(&stage).await, 0);
    assert_eq!(topic_len(&stage, OUT).await, 0);
}

/// 100 messages of 900 KiB from one record once peaked the host at 321 MB,
/// five such records in one batch at 1,352 MB (every record's publications
/// held until one insert, and copied twice more to write it). A batch now
/// stores a record's publications before the next handler runs, in inserts
/// of at most 4 MiB, and the relay reads at most 16 MiB a round: the peak
/// grows by about one record's publications (two with glibc's per-thread
/// arenas), alone or five in a batch (docs/outbox.md states the bound).
#[tokio::test(flavor = "multi_thread")]
async fn a_record_publishing_90_mb_alone_or_five_in_one_batch_keep_the_hosts_peak_memory_under_the_bound(
) {
    const MESSAGE: usize = 900 << 10;
    const PUBLISHED: u64 = 100 * MESSAGE as u64;
    let stage = stage_with_output().await;
    let big = |id: &str| {
        attack(
            &stage,
            id,
            serde_json::json!({ "copies": 100, "value_bytes": MESSAGE }),
        )
    };
    stage
        .produce(vec![attack(&stage, "warm-up", serde_json::json!({}))])
        .await;
    let host = stage.spawn_host(
        &plugin("publish-hostile"),
        &[
            "--publish-topic",
            OUT,
            "--max-publish-bytes",
            "100000000",
            "--batch-max",
            "5",
            "--batch-linger-ms",
            "10000",
        ],
    );
    wait_until("the warm-up handled", LONG, || async {
        stage.committed(0).await == Some(1)
    })
    .await;
    let before = host.peak_rss_bytes();
    // Alone.
    stage.produce(vec![big("big-alone")]).await;
    wait_until("the record handled", LONG, || async {
        stage.committed(0).await == Some(2)
    })
    .await;
    outbox_emptied(&stage).await;
    let alone = host.peak_rss_bytes().saturating_sub(before);
    // Five in one batch.
    stage
        .produce((0..5).map(|i| big(&format!("big-{i}"))).collect())
        .await;
    wait_until("the five handled", LONG, || async {
        stage.committed(0).await == Some(7)
    })
    .await;
    outbox_emptied(&stage).await;
    let five = host.peak_rss_bytes().saturating_sub(before);
    eprintln!(
        "host peak RSS grew by {} MiB alone, {} MiB with five in one batch (published {} MiB per record)",
        alone >> 20,
        five >> 20,
        PUBLISHED >> 20
    );
    let batches = stage
        .db
        .count("SELECT count(DISTINCT received_at) FROM inbox_host.inbox WHERE message_id LIKE 'big-_'")
        .await;
    assert_eq!(batches, 1, "the five records committed in one transaction");
    assert_eq!(topic_len(&stage, OUT).await, 1 + 600);
    // docs/outbox.md: twice one record's publications per batch in flight (the
    // record's, and what the allocator keeps of the one before), plus 64 MiB.
    let bound = 2 * PUBLISHED + (64 << 20);
    assert!(alone < bound, "alone: grew by {} MiB", alone >> 20);
    assert!(five < bound, "five in a batch: grew by {} MiB", five >> 20);
}
