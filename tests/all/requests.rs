//! Requests after commit end to end, against a real HTTP receiver that honours
//! `Idempotency-Key`: a request leaves only after its transaction committed,
//! with the key derived from the record, the same on every resend (after a
//! retryable answer, after a SIGKILL, after a redrive); final answers become
//! dead letters of kind `request`; one ordering key's requests go in order; and
//! what the gate refuses never reaches a socket.

use std::time::Duration;

use inbox_host::inbox::idempotency_key;
use inbox_host_tests::host::{self, Host};
use inbox_host_tests::receiver::Receiver;
use inbox_host_tests::stage::Stage;
use inbox_host_tests::{plugin, wait_until};

const LONG: Duration = Duration::from_secs(120);

/// An order for the plugin, to `path` on `receiver`, with more knobs.
fn order(
    stage: &Stage,
    receiver: &Receiver,
    id: &str,
    path: &str,
    knobs: serde_json::Value,
) -> inbox_host::kafka::OutgoingRecord {
    receiver.order(stage, "notify_url", id, path, knobs)
}

fn spawn_notify(stage: &Stage, receiver: &Receiver, extra: &[&str]) -> Host {
    let mut args = vec!["--http-allow", receiver.origin.as_str()];
    args.extend_from_slice(extra);
    stage.spawn_host(&plugin("notify"), &args)
}

async fn requests_left(stage: &Stage) -> i64 {
    stage
        .db
        .count("SELECT count(*) FROM inbox_host.requests")
        .await
}

async fn wait_applied(receiver: &Receiver, n: usize) {
    wait_until(&format!("{n} request(s) applied"), LONG, || async {
        receiver.applied() >= n
    })
    .await;
}

/// `(reason, request)` of the request dead letter caused by `id`.
async fn request_letter(stage: &Stage, id: &str) -> (String, serde_json::Value) {
    wait_until("a request dead letter", LONG, || async {
        stage
            .db
            .count(&format!(
                "SELECT count(*) FROM inbox_host.dead_letters WHERE letter_kind = 'request' AND message_id = '{id}'"
            ))
            .await
            == 1
    })
    .await;
    sqlx::query_as(
        "SELECT reason, request FROM inbox_host.dead_letters WHERE letter_kind = 'request' AND message_id = $1",
    )
    .bind(id)
    .fetch_one(&stage.db.pool)
    .await
    .expect("letter")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_after_commit_is_sent_once_with_the_key_derived_from_its_record() {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    stage
        .produce(vec![order(
            &stage,
            &receiver,
            "o-1",
            "/notify",
            serde_json::json!({}),
        )])
        .await;
    let _host = spawn_notify(&stage, &receiver, &[]);
    wait_applied(&receiver, 1).await;
    wait_until("the request row gone", LONG, || async {
        requests_left(&stage).await == 0
    })
    .await;
    let arrivals = receiver.arrivals();
    assert_eq!(arrivals.len(), 1, "{arrivals:?}");
    let key = idempotency_key(&stage.group, "o-1", 0);
    assert_eq!(arrivals[0].key.as_deref(), Some(key.as_str()));
    assert_eq!(arrivals[0].method, "POST");
    let body: serde_json::Value = serde_json::from_slice(&arrivals[0].body).expect("json body");
    assert_eq!(body["order_id"], "o-1");
    let marker: String = sqlx::query_scalar("SELECT marker FROM invoices WHERE order_id = 'o-1'")
        .fetch_one(&stage.db.pool)
        .await
        .expect("invoice");
    assert_eq!(marker, key, "the handler was told the key it would carry");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_asks_and_then_fails_or_traps_sends_nothing() {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    stage
        .produce(vec![
            order(
                &stage,
                &receiver,
                "o-fails",
                "/notify",
                serde_json::json!({ "fail_after_request": true }),
            ),
            order(
                &stage,
                &receiver,
                "o-traps",
                "/notify",
                serde_json::json!({ "trap_after_request": true }),
            ),
            order(
                &stage,
                &receiver,
                "o-next",
                "/notify",
                serde_json::json!({}),
            ),
        ])
        .await;
    let _host = spawn_notify(&stage, &receiver, &["--max-attempts", "2"]);
    wait_until("all three records done", LONG, || async {
        stage.committed(0).await == Some(3)
    })
    .await;
    wait_applied(&receiver, 1).await;
    wait_until("no request left", LONG, || async {
        requests_left(&stage).await == 0
    })
    .await;
    let keys: Vec<Option<String>> = receiver.arrivals().into_iter().map(|a| a.key).collect();
    assert_eq!(
        keys,
        [Some(idempotency_key(&stage.group, "o-next", 0))],
        "only the committed run's request"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn answers_500_and_503_are_retried_with_the_same_key_until_200_and_applied_once() {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    receiver.script("/flaky", &[(500, &[]), (503, &[])]);
    stage
        .produce(vec![order(
            &stage,
            &receiver,
            "o-1",
            "/flaky",
            serde_json::json!({}),
        )])
        .await;
    let _host = spawn_notify(&stage, &receiver, &[]);
    wait_applied(&receiver, 1).await;
    let arrivals = receiver.arrivals();
    let statuses: Vec<u16> = arrivals.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [500, 503, 200]);
    let key = idempotency_key(&stage.group, "o-1", 0);
    assert!(
        arrivals
            .iter()
            .all(|a| a.key.as_deref() == Some(key.as_str())),
        "{arrivals:?}"
    );
    wait_until("the request row gone", LONG, || async {
        requests_left(&stage).await == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_429_with_retry_after_2_is_sent_again_no_sooner_than_2_s_later() {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    receiver.script("/limited", &[(429, &[("retry-after", "2")])]);
    stage
        .produce(vec![order(
            &stage,
            &receiver,
            "o-1",
            "/limited",
            serde_json::json!({}),
        )])
        .await;
    let _host = spawn_notify(&stage, &receiver, &[]);
    wait_applied(&receiver, 1).await;
    let arrivals = receiver.arrivals();
    assert_eq!(arrivals.len(), 2, "{arrivals:?}");
    let waited = arrivals[1].at - arrivals[0].at;
    assert!(
        waited >= Duration::from_secs(2),
        "sent again after {waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_404_becomes_a_request_dead_letter_and_a_redrive_sends_it_again_with_the_same_key() {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    receiver.always("/missing", 404);
    stage
        .produce(vec![order(
            &stage,
            &receiver,
            "o-1",
            "/missing",
            serde_json::json!({}),
        )])
        .await;
    let _host = spawn_notify(&stage, &receiver, &[]);
    let (reason, request) = request_letter(&stage, "o-1").await;
    let key = idempotency_key(&stage.group, "o-1", 0);
    assert!(reason.contains("answered 404"), "{reason}");
    assert_eq!(request["idempotency_key"], key.as_str());
    assert_eq!(request["answer"]["status"], 404);
    assert_eq!(requests_left(&stage).await, 0);
    assert_eq!(
        receiver.arrivals().len(),
        1,
        "a final status is not retried"
    );

    receiver.always("/missing", 200);
    let id: i64 =
        sqlx::query_scalar("SELECT id FROM inbox_host.dead_letters WHERE letter_kind = 'request'")
            .fetch_one(&stage.db.pool)
            .await
            .expect("letter id");
    let redrive = host::run(
        &["dead-letters", "redrive", &id.to_string()],
        &[
            ("DATABASE_URL", stage.db.url.as_str()),
            ("KAFKA_BROKERS", stage.broker.bootstrap()),
        ],
    );
    let said = String::from_utf8_lossy(&redrive.stdout);
    assert!(
        redrive.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&redrive.stderr)
    );
    assert!(said.contains(&key), "{said}");
    wait_applied(&receiver, 1).await;
    let arrivals = receiver.arrivals();
    assert_eq!(arrivals.len(), 2);
    assert_eq!(
        arrivals[1].key.as_deref(),
        Some(key.as_str()),
        "the same key after a redrive"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn one_ordering_keys_requests_go_in_the_order_written_while_the_first_is_retried() {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    receiver.script("/ordered", &[(503, &[]), (503, &[])]);
    let records = (1..=5)
        .map(|i| {
            order(
                &stage,
                &receiver,
                &format!("o-{i}"),
                "/ordered",
                serde_json::json!({ "customer": "c-1" }),
            )
        })
        .chain([order(
            &stage,
            &receiver,
            "other",
            "/other",
            serde_json::json!({ "customer": "c-2" }),
        )])
        .collect();
    stage.produce(records).await;
    let _host = spawn_notify(&stage, &receiver, &[]);
    wait_applied(&receiver, 6).await;
    let arrivals = receiver.arrivals();
    let ordered: Vec<String> = arrivals
        .iter()
        .filter(|a| a.path == "/ordered")
        .map(|a| {
            let body: serde_json::Value = serde_json::from_slice(&a.body).expect("json");
            body["order_id"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    assert_eq!(
        ordered,
        ["o-1", "o-1", "o-1", "o-2", "o-3", "o-4", "o-5"],
        "{arrivals:?}"
    );
    let other = arrivals
        .iter()
        .position(|a| a.path == "/other")
        .expect("the other key");
    let first_success = arrivals
        .iter()
        .position(|a| a.status == 200 && a.path == "/ordered")
        .expect("o-1 applied");
    assert!(
        other < first_success,
        "another key does not wait for c-1's retries: {arrivals:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_killed_while_its_request_is_in_flight_sends_it_again_with_the_same_key_and_it_is_applied_once(
) {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    receiver.hold("/held", Duration::from_secs(30));
    stage
        .produce(vec![order(
            &stage,
            &receiver,
            "o-1",
            "/held",
            serde_json::json!({}),
        )])
        .await;
    let flags = ["--http-timeout-ms", "3000"];
    let mut first = spawn_notify(&stage, &receiver, &flags);
    wait_until("the request arrived", LONG, || async {
        !receiver.arrivals().is_empty()
    })
    .await;
    first.kill_hard();
    assert_eq!(
        requests_left(&stage).await,
        1,
        "the request is kept until it is done"
    );
    let _second = spawn_notify(&stage, &receiver, &flags);
    wait_until("the request sent again", LONG, || async {
        receiver.arrivals().len() >= 2
    })
    .await;
    wait_until("the request done", LONG, || async {
        requests_left(&stage).await == 0
    })
    .await;
    let arrivals = receiver.arrivals();
    let key = idempotency_key(&stage.group, "o-1", 0);
    assert!(
        arrivals
            .iter()
            .all(|a| a.key.as_deref() == Some(key.as_str())),
        "{arrivals:?}"
    );
    assert_eq!(
        receiver.applied(),
        1,
        "the receiver applied the effect once"
    );
}

/// URLs the gate refuses at the call: the record fails for good (kind
/// `request-rule`, set aside at once) and nothing reaches a socket.
#[tokio::test(flavor = "multi_thread")]
async fn urls_outside_the_rules_and_addresses_of_this_machine_are_refused_at_the_call() {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    let port = receiver.port;
    let refused = [
        ("elsewhere", "https://api.example.com/charge".to_string()),
        ("loopback", format!("http://127.0.0.2:{port}/x")),
        ("ipv6-loopback", format!("http://[::1]:{port}/x")),
        (
            "metadata",
            "http://169.254.169.254/latest/meta-data/".to_string(),
        ),
        ("mapped", format!("http://[::ffff:127.0.0.1]:{port}/x")),
    ];
    let records = refused
        .iter()
        .map(|(id, url)| {
            let payload = serde_json::json!({ "order_id": id, "amount": 1, "notify_url": url });
            stage.record(id, Some(0), payload.to_string())
        })
        .collect();
    stage.produce(records).await;
    // The receiver is allowed by name only: no rule names those addresses.
    let localhost = format!("http://localhost:{port}");
    let args = ["--http-allow", localhost.as_str()];
    let _host = stage.spawn_host(&plugin("notify"), &args);
    wait_until("every record set aside", LONG, || async {
        stage.committed(0).await == Some(5)
    })
    .await;
    for (id, _) in &refused {
        let (kind, reason, attempts): (String, String, i32) = sqlx::query_as(
            "SELECT failure_kind, reason, attempts FROM inbox_host.dead_letters WHERE message_id = $1",
        )
        .bind(id)
        .fetch_one(&stage.db.pool)
        .await
        .expect("a dead letter");
        assert_eq!(
            (kind.as_str(), attempts),
            ("request-rule", 1),
            "{id}: {reason}"
        );
        assert!(reason.contains("IH020"), "{id}: {reason}");
    }
    assert!(receiver.arrivals().is_empty());
    assert_eq!(requests_left(&stage).await, 0);
}

/// A name the rules allow that resolves to loopback is refused when it is
/// resolved, before any connection: the receiver, listening on that loopback
/// port, sees nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_name_that_resolves_to_loopback_is_never_connected_to() {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    let localhost = format!("http://localhost:{}", receiver.port);
    let by_name = serde_json::json!({ "order_id": "by-name", "amount": 1, "notify_url": format!("{localhost}/x") });
    stage
        .produce(vec![stage.record("by-name", Some(0), by_name.to_string())])
        .await;
    let _host = stage.spawn_host(&plugin("notify"), &["--http-allow", &localhost]);
    let (reason, request) = request_letter(&stage, "by-name").await;
    assert!(
        reason.contains("loopback") && reason.contains("refused"),
        "{reason}"
    );
    assert!(
        request["answer"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("localhost")),
        "{request}"
    );
    assert!(
        receiver.arrivals().is_empty(),
        "the loopback name was never connected to"
    );
}

/// A redirect is an answer, not an instruction: the request ends as a dead
/// letter with the 302, and the location (the metadata address) is not asked.
#[tokio::test(flavor = "multi_thread")]
async fn a_redirect_is_not_followed() {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    receiver.script(
        "/redirect",
        &[(
            302,
            &[("location", "http://169.254.169.254/latest/meta-data/")],
        )],
    );
    stage
        .produce(vec![order(
            &stage,
            &receiver,
            "redirected",
            "/redirect",
            serde_json::json!({}),
        )])
        .await;
    let _host = spawn_notify(&stage, &receiver, &[]);
    let (reason, request) = request_letter(&stage, "redirected").await;
    assert!(
        reason.contains("answered 302") && reason.contains("redirects are not followed"),
        "{reason}"
    );
    assert_eq!(request["answer"]["status"], 302);
    let paths: Vec<String> = receiver.arrivals().into_iter().map(|a| a.path).collect();
    assert_eq!(paths, ["/redirect"]);
}

/// `/metrics` counts per origin what went through the gate: answers by status
/// class, retries, latency, and the backlog waiting (with its oldest age).
#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_requests_per_origin_by_outcome_with_retries_latency_and_backlog() {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    receiver.script("/flaky", &[(500, &[]), (503, &[])]);
    receiver.always("/down", 503);
    stage
        .produce(vec![
            order(&stage, &receiver, "o-1", "/flaky", serde_json::json!({})),
            order(&stage, &receiver, "o-2", "/down", serde_json::json!({})),
        ])
        .await;
    let host = spawn_notify(&stage, &receiver, &[]);
    wait_applied(&receiver, 1).await;
    // Every sample is of the receiver's origin: its label, and one more.
    let origin = format!("origin=\"{}\"", receiver.origin);
    let sum = |family: &str, label: &str| host.metric_sum_of(family, &[origin.as_str(), label]);
    wait_until("the gate's counts in /metrics", LONG, || async {
        sum("inbox_host_http_requests_total", "outcome=\"2xx\"") == Some(1.0)
            && sum("inbox_host_http_requests_total", "outcome=\"5xx\"").unwrap_or(0.0) >= 4.0
            && sum("inbox_host_http_retries_total", &origin).unwrap_or(0.0) >= 4.0
            && sum("inbox_host_http_backlog_rows", &origin) == Some(1.0)
            && sum("inbox_host_http_backlog_oldest_age_seconds", &origin).unwrap_or(0.0) > 0.0
    })
    .await;
    let answered = sum("inbox_host_http_requests_total", "purpose=\"after_commit\"");
    let timed = sum("inbox_host_http_request_duration_seconds_count", &origin);
    assert!(
        answered.is_some() && answered <= timed,
        "every request sent is timed: {answered:?} sent, {timed:?} timed"
    );
}
