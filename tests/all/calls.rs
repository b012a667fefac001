//! Calls in the handler end to end, against a real HTTP receiver that honours
//! `Idempotency-Key`: the answer is recorded in the same transaction; a run
//! that rolls back after its call (a trap, a deadline) runs again with the
//! same key, so the charge is applied once and its id recorded once; what the
//! gate refuses fails the run for good and never reaches a socket.

use std::time::Duration;

use inbox_host::inbox::call_key;
use inbox_host_tests::host::Host;
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
    receiver.order(stage, "charge_url", id, path, knobs)
}

fn spawn_charge(stage: &Stage, receiver: &Receiver, extra: &[&str]) -> Host {
    let mut args = vec!["--http-allow", receiver.origin.as_str()];
    args.extend_from_slice(extra);
    stage.spawn_host(&plugin("charge"), &args)
}

/// The charge id recorded for `id`, once its offset is committed.
async fn recorded(stage: &Stage, id: &str) -> Vec<String> {
    sqlx::query_scalar("SELECT marker FROM invoices WHERE order_id = $1")
        .bind(id)
        .fetch_all(&stage.db.pool)
        .await
        .expect("invoices")
}

/// `(failure_kind, reason, attempts)` of `id`'s dead letter, once there is one.
async fn dead_letter(stage: &Stage, id: &str) -> (String, String, i32) {
    wait_until(&format!("{id} set aside"), LONG, || async {
        stage
            .db
            .count(&format!(
                "SELECT count(*) FROM inbox_host.dead_letters WHERE message_id = '{id}'"
            ))
            .await
            == 1
    })
    .await;
    sqlx::query_as(
        "SELECT failure_kind, reason, attempts FROM inbox_host.dead_letters WHERE message_id = $1",
    )
    .bind(id)
    .fetch_one(&stage.db.pool)
    .await
    .expect("a dead letter")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_is_answered_in_the_handler_and_its_answer_recorded_in_the_same_transaction() {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    stage
        .produce(vec![order(
            &stage,
            &receiver,
            "o-1",
            "/charges",
            serde_json::json!({}),
        )])
        .await;
    let host = spawn_charge(&stage, &receiver, &[]);
    wait_until("o-1 committed", LONG, || async {
        stage.committed(0).await == Some(1)
    })
    .await;
    assert_eq!(recorded(&stage, "o-1").await, ["ch-1"]);
    let origin = format!("origin=\"{}\"", receiver.origin);
    let counted = ["purpose=\"call\"", "outcome=\"2xx\"", origin.as_str()];
    assert_eq!(
        host.metric_sum_of("inbox_host_http_requests_total", &counted),
        Some(1.0),
        "the call is counted under its origin"
    );
    let arrivals = receiver.arrivals();
    assert_eq!(arrivals.len(), 1, "{arrivals:?}");
    assert_eq!(
        arrivals[0].key.as_deref(),
        Some(call_key(&stage.group, "o-1", 0).as_str())
    );
    assert_eq!(
        (arrivals[0].method.as_str(), arrivals[0].path.as_str()),
        ("POST", "/charges")
    );
    let body: serde_json::Value = serde_json::from_slice(&arrivals[0].body).expect("json body");
    assert_eq!(
        (body["order_id"].as_str(), body["amount"].as_f64()),
        (Some("o-1"), Some(10.0))
    );
    assert_eq!(
        stage
            .db
            .count("SELECT count(*) FROM inbox_host.requests")
            .await,
        0,
        "a call is not a request after commit: nothing is left to send"
    );
}

/// The run charges, then traps: everything rolls back and the record comes
/// back; the next run repeats the call with the same key, the receiver answers
/// it as the first time without charging again, and that charge is recorded.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_traps_after_its_call_repeats_the_key_and_the_charge_is_applied_once() {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    stage
        .produce(vec![order(
            &stage,
            &receiver,
            "o-trap",
            "/charges",
            serde_json::json!({ "trap_unless_repeat": true }),
        )])
        .await;
    let _host = spawn_charge(&stage, &receiver, &["--retry-initial-ms", "50"]);
    wait_until("o-trap committed", LONG, || async {
        stage.committed(0).await == Some(1)
    })
    .await;
    let keys: Vec<Option<String>> = receiver.arrivals().into_iter().map(|a| a.key).collect();
    let key = call_key(&stage.group, "o-trap", 0);
    assert_eq!(keys, [Some(key.clone()), Some(key)], "two runs, one key");
    assert_eq!(receiver.applied(), 1);
    assert_eq!(recorded(&stage, "o-trap").await, ["ch-1"]);
}

/// The guest's deadline counts the wait: an answer held past it cancels the
/// run (nothing committed, retried), and the repeat is answered and recorded.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_outlasts_the_guest_deadline_rolls_back_and_its_repeat_is_recorded() {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    receiver.hold("/slow", Duration::from_secs(3));
    stage
        .produce(vec![order(
            &stage,
            &receiver,
            "o-slow",
            "/slow",
            serde_json::json!({}),
        )])
        .await;
    let _host = spawn_charge(
        &stage,
        &receiver,
        &["--guest-deadline-ms", "1000", "--retry-initial-ms", "50"],
    );
    wait_until("o-slow committed", LONG, || async {
        stage.committed(0).await == Some(1)
    })
    .await;
    let arrivals = receiver.arrivals();
    assert!(arrivals.len() >= 2, "{arrivals:?}");
    assert!(arrivals.iter().all(|a| a.key == arrivals[0].key));
    assert_eq!(receiver.applied(), 1);
    assert_eq!(recorded(&stage, "o-slow").await, ["ch-1"]);
}

/// Every call the gate's rules refuse fails its record for good (one attempt,
/// `request-rule`), even when the handler swallows the error and returns ok:
/// nothing the run wrote is committed and no refused call reaches a socket.
#[tokio::test(flavor = "multi_thread")]
async fn calls_the_gate_refuses_fail_the_run_for_good_even_when_the_handler_swallows_them() {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    let port = receiver.port;
    let refused = [
        ("elsewhere", "https://api.example.com/charges".to_string()),
        ("loopback", format!("http://127.0.0.2:{port}/x")),
        ("ipv6-loopback", format!("http://[::1]:{port}/x")),
        (
            "metadata",
            "http://169.254.169.254/latest/meta-data/".to_string(),
        ),
        ("mapped", format!("http://[::ffff:127.0.0.1]:{port}/x")),
        ("by-name", format!("http://localhost:{port}/x")),
    ];
    let records: Vec<_> = refused
        .iter()
        .map(|(id, url)| {
            let payload = serde_json::json!({
                "order_id": id, "amount": 1, "charge_url": url, "swallow_errors": true,
            });
            stage.record(id, Some(0), payload.to_string())
        })
        .collect();
    stage.produce(records).await;
    // The receiver is allowed by name only: no rule names those addresses, and
    // `localhost` resolves to loopback, which is refused when resolved.
    let localhost = format!("http://localhost:{port}");
    let _host = stage.spawn_host(&plugin("charge"), &["--http-allow", localhost.as_str()]);
    for (id, _) in &refused {
        let (kind, reason, attempts) = dead_letter(&stage, id).await;
        assert_eq!(
            (kind.as_str(), attempts),
            ("request-rule", 1),
            "{id}: {reason}"
        );
        assert!(reason.contains("IH020"), "{id}: {reason}");
    }
    wait_until("every record done", LONG, || async {
        stage.committed(0).await == Some(6)
    })
    .await;
    assert_eq!(stage.db.count("SELECT count(*) FROM invoices").await, 0);
    assert!(receiver.arrivals().is_empty(), "{:?}", receiver.arrivals());
}

/// `--http-max-requests` counts a run's calls: the ones within it are sent,
/// the one past it is refused and fails the run for good.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_past_http_max_requests_is_refused_and_fails_the_run() {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    stage
        .produce(vec![order(
            &stage,
            &receiver,
            "too-many",
            "/many",
            serde_json::json!({ "calls": 3, "swallow_errors": true }),
        )])
        .await;
    let _host = spawn_charge(&stage, &receiver, &["--http-max-requests", "2"]);
    let (kind, reason, attempts) = dead_letter(&stage, "too-many").await;
    assert_eq!((kind.as_str(), attempts), ("request-rule", 1), "{reason}");
    assert!(
        reason.contains("IH021") && reason.contains("--http-max-requests"),
        "{reason}"
    );
    let paths: Vec<String> = receiver.arrivals().into_iter().map(|a| a.path).collect();
    assert_eq!(
        paths,
        ["/many", "/many"],
        "only the calls within the bound were sent"
    );
    assert_eq!(recorded(&stage, "too-many").await, Vec::<String>::new());
}

/// The host's own headers cannot be set by a call, in any spelling: wasi:http
/// refuses the header as the guest writes it (the SDK's call fails as written,
/// not retryable), so no such call is ever sent.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_setting_the_idempotency_key_itself_is_refused() {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    stage
        .produce(vec![
            order(
                &stage,
                &receiver,
                "own-key",
                "/charges",
                serde_json::json!({ "headers": [["Idempotency-Key", "mine"]] }),
            ),
            order(
                &stage,
                &receiver,
                "own-key-underscored",
                "/charges",
                serde_json::json!({ "headers": [["idempotency_key", "mine"]] }),
            ),
        ])
        .await;
    let _host = spawn_charge(&stage, &receiver, &["--max-fatal-attempts", "1"]);
    for id in ["own-key", "own-key-underscored"] {
        let (kind, reason, attempts) = dead_letter(&stage, id).await;
        assert_eq!(
            (kind.as_str(), attempts),
            ("handler-error", 1),
            "{id}: {reason}"
        );
        assert!(reason.contains("a header is refused"), "{id}: {reason}");
    }
    assert!(receiver.arrivals().is_empty(), "{:?}", receiver.arrivals());
}

/// A redirect is the answer the handler gets (here it declines on it); its
/// location, the metadata address, is never asked.
#[tokio::test(flavor = "multi_thread")]
async fn a_redirect_is_handed_to_the_handler_and_not_followed() {
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
    let _host = spawn_charge(&stage, &receiver, &["--max-fatal-attempts", "1"]);
    let (kind, reason, _) = dead_letter(&stage, "redirected").await;
    assert_eq!(kind, "handler-error", "{reason}");
    assert!(reason.contains("declined (302)"), "{reason}");
    let paths: Vec<String> = receiver.arrivals().into_iter().map(|a| a.path).collect();
    assert_eq!(paths, ["/redirect"]);
}

/// An answer longer than `--http-max-response-bytes` is an error the handler
/// sees, never a body cut short that it would record as if whole.
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_over_the_response_bound_is_an_error_not_a_cut_body() {
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    stage
        .produce(vec![order(
            &stage,
            &receiver,
            "long-answer",
            "/charges",
            serde_json::json!({}),
        )])
        .await;
    let _host = spawn_charge(&stage, &receiver, &["--http-max-response-bytes", "16"]);
    let (_, reason, _) = dead_letter(&stage, "long-answer").await;
    assert!(reason.contains("--http-max-response-bytes"), "{reason}");
    assert_eq!(recorded(&stage, "long-answer").await, Vec::<String>::new());
}

/// A secret reaches only the rule it is bound to, as the gate sends: the
/// guest wrote a reference, the receiver under the rule gets the value, a
/// call elsewhere naming it is refused and never sent, and the value is in
/// neither the host's log nor any table.
#[tokio::test(flavor = "multi_thread")]
async fn a_secret_reaches_only_its_bound_rule_and_never_the_logs_or_the_database() {
    const VALUE: &str = "sk_test_7f3a9c1e";
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    let bearer = serde_json::json!({ "headers": [["authorization", "Bearer {{secret:PAY}}"]] });
    stage
        .produce(vec![
            order(&stage, &receiver, "bound", "/pay/charges", bearer.clone()),
            order(&stage, &receiver, "elsewhere", "/other", bearer),
        ])
        .await;
    let secret = format!("PAY=env:PAY_KEY@{}/pay/", receiver.origin);
    let host = stage.spawn_host_with_env(
        &plugin("charge"),
        &[
            "--http-allow",
            receiver.origin.as_str(),
            "--http-secret",
            secret.as_str(),
        ],
        &[("PAY_KEY", VALUE)],
    );
    let (kind, reason, _) = dead_letter(&stage, "elsewhere").await;
    assert_eq!(kind, "request-rule", "{reason}");
    assert!(
        reason.contains("secret PAY may be sent only to"),
        "{reason}"
    );
    wait_until("both records done", LONG, || async {
        stage.committed(0).await == Some(2)
    })
    .await;
    assert_eq!(recorded(&stage, "bound").await, ["ch-1"]);
    // Batched with the refused record, the bound one ran again after the
    // batch rolled back: the same call, the same key, applied once.
    let arrivals = receiver.arrivals();
    assert!(
        arrivals.iter().all(|a| a.path == "/pay/charges"),
        "{arrivals:?}"
    );
    assert_eq!(receiver.applied(), 1);
    let authorization = arrivals[0]
        .headers
        .iter()
        .find(|(name, _)| name == "authorization")
        .map(|(_, value)| value.as_str());
    assert_eq!(authorization, Some(format!("Bearer {VALUE}").as_str()));
    assert!(
        !host.log().contains(VALUE),
        "the secret is in the host's log"
    );
    let stored = stage
        .db
        .count(&format!(
            "SELECT count(*) FROM (
                SELECT row_to_json(d)::text AS t FROM inbox_host.dead_letters d
                UNION ALL SELECT row_to_json(i)::text FROM invoices i
                UNION ALL SELECT row_to_json(r)::text FROM inbox_host.requests r
                UNION ALL SELECT row_to_json(a)::text FROM inbox_host.attempts a
             ) rows WHERE t LIKE '%{VALUE}%'"
        ))
        .await;
    assert_eq!(stored, 0, "the secret is stored in a table");
}
