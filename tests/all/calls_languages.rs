//! Both kinds of call beyond the database from Python and JavaScript handlers,
//! built by the real `inbox-host build`: a call in the handler (componentize-py's
//! wasi:http bindings through the SDK's `call`, and `fetch()`) whose answer is
//! recorded, and a request after commit; a run that fails after both repeats
//! the call's key and sends no request.

use std::time::Duration;

use inbox_host::inbox::{call_key, idempotency_key};
use inbox_host_tests::receiver::Receiver;
use inbox_host_tests::stage::Stage;
use inbox_host_tests::wait_until;

use crate::languages::built;

/// Long enough for a first build on a new machine (it installs the toolchain).
const LONG: Duration = Duration::from_secs(240);

/// `o-1` is charged, recorded and notified; `o-2` fails after its charge and
/// its request, rolls back, and runs again: one charge (its key twice), its id
/// recorded, one notification. Nothing is sent for the failed run.
async fn charge_then_notify(folder: &'static str) {
    let plugin = built(folder).await;
    let stage = Stage::new(1).await;
    let receiver = Receiver::start().await;
    let notify = format!("{}/notify", receiver.origin);
    let orders = [("o-1", false), ("o-2", true)]
        .map(|(id, fail)| {
            let knobs = serde_json::json!({ "notify_url": notify, "fail_unless_repeat": fail });
            receiver.order(&stage, "charge_url", id, "/charges", knobs)
        })
        .to_vec();
    stage.produce(orders).await;
    let host = stage.spawn_host(
        &plugin,
        &[
            "--http-allow",
            receiver.origin.as_str(),
            "--retry-initial-ms",
            "50",
        ],
    );
    wait_until("both orders committed and notified", LONG, || async {
        stage.committed(0).await == Some(2)
            && receiver
                .arrivals()
                .iter()
                .filter(|a| a.path == "/notify")
                .count()
                == 2
    })
    .await;
    let keys_on = |path: &str| -> Vec<String> {
        let arrivals = receiver.arrivals().into_iter().filter(|a| a.path == path);
        arrivals.map(|a| a.key.unwrap_or_default()).collect()
    };
    let group = &stage.group;
    let (charge_1, charge_2) = (call_key(group, "o-1", 0), call_key(group, "o-2", 0));
    let charges = keys_on("/charges");
    // A batch re-run after o-2's failure may repeat o-1's call too: same key.
    assert!(
        charges.iter().all(|k| *k == charge_1 || *k == charge_2)
            && charges.iter().filter(|k| **k == charge_2).count() >= 2,
        "o-2's charge repeats its key on the run after the failure: {charges:?}\n{}",
        host.log()
    );
    // The failure is the handler's retryable error, not a crash (in JavaScript,
    // a rejection of the async handler's promise).
    assert!(
        host.log()
            .contains("message_id=o-2 kind=handler-error retryable=true"),
        "{}",
        host.log()
    );
    let mut notified = keys_on("/notify");
    notified.sort();
    let mut expected = vec![
        idempotency_key(group, "o-1", 0),
        idempotency_key(group, "o-2", 0),
    ];
    expected.sort();
    assert_eq!(
        notified, expected,
        "one notification per order, none from the failed run"
    );
    assert_eq!(receiver.applied(), 4, "two charges and two notifications");
    let mut recorded: Vec<(String, String)> =
        sqlx::query_as("SELECT order_id, marker FROM invoices ORDER BY order_id")
            .fetch_all(&stage.db.pool)
            .await
            .expect("invoices");
    recorded.sort();
    assert_eq!(
        recorded
            .iter()
            .map(|(id, _)| id.as_str())
            .collect::<Vec<_>>(),
        ["o-1", "o-2"]
    );
    assert!(
        recorded.iter().all(|(_, marker)| marker.starts_with("ch-")),
        "each invoice records its charge id: {recorded:?}"
    );
    assert_ne!(recorded[0].1, recorded[1].1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_handler_calls_records_the_answer_and_requests_after_commit() {
    charge_then_notify("charge-py").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_javascript_handler_fetches_records_the_answer_and_requests_after_commit() {
    charge_then_notify("charge-js").await;
}
