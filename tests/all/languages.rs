//! Handlers in Python, JavaScript and TypeScript: built from `plugins/` by the
//! real `inbox-host build`, run through the real binary, broker and PostgreSQL,
//! and held by the sandbox exactly like their Rust twins.

use std::path::PathBuf;
use std::time::Duration;

use inbox_host::inbox::{FailureKind, Message, Outcome};
use inbox_host::plugin::{Plugin, Runtime, SandboxLimits};
use inbox_host_tests::stage::Stage;
use inbox_host_tests::{guest_plugin, wait_until, TestDb};

use crate::inbox_core::runner;

/// Long enough for a first build on a new machine (it installs the toolchain).
const LONG: Duration = Duration::from_secs(240);

pub(crate) async fn built(folder: &'static str) -> PathBuf {
    tokio::task::spawn_blocking(move || guest_plugin(folder))
        .await
        .expect("build task")
}

/// 30 orders and one record that is not JSON: the orders become invoices, the
/// bad record a dead letter saying why, and every offset is committed. `extra`:
/// more flags for the host.
async fn billing_through_the_binary(folder: &'static str, extra: &[&str]) {
    let plugin = built(folder).await;
    let stage = Stage::new(3).await;
    let mut records: Vec<_> = (0..30)
        .map(|i| stage.order(&format!("{folder}-{i}"), i))
        .collect();
    records.push(stage.record("not-an-order", Some(0), "{ this is not json"));
    stage.produce(records).await;
    let host = stage.spawn_host(&plugin, extra);
    wait_until("every record committed", LONG, || async {
        stage.committed_total(3).await == 31
    })
    .await;
    assert_eq!(
        stage
            .db
            .count("SELECT count(*) FROM invoices WHERE marker = 'billing-v1'")
            .await,
        30,
        "{}",
        host.log()
    );
    assert_eq!(
        stage
            .db
            .count("SELECT sum(amount)::bigint FROM invoices")
            .await,
        (0..30).sum::<i64>()
    );
    let reason: String = sqlx::query_scalar(
        "SELECT failure_kind || ': ' || reason FROM inbox_host.dead_letters
          WHERE message_id = 'not-an-order'",
    )
    .fetch_one(&stage.db.pool)
    .await
    .expect("the bad record is a dead letter");
    assert!(
        reason.starts_with("handler-error: ") && reason.contains("payload is not JSON"),
        "{reason}"
    );
    drop(host);
}

/// With instances reused: the bad record's failure discards its instance and
/// the orders after it are still handled.
#[tokio::test(flavor = "multi_thread")]
async fn python_billing_processes_orders_through_the_binary_reusing_instances() {
    billing_through_the_binary("billing-py", &["--reuse-instance"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn javascript_billing_processes_orders_through_the_binary() {
    billing_through_the_binary("billing-js", &[]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_billing_processes_orders_through_the_binary() {
    billing_through_the_binary("billing-ts", &[]).await;
}

/// The sandbox twin in `folder`, loaded in process under `limits`, compiled
/// code kept beside the built plugins so each test does not compile again.
async fn twin(folder: &'static str, limits: SandboxLimits) -> Plugin {
    let path = built(folder).await;
    tokio::task::spawn_blocking(move || {
        let cache = PathBuf::from(env!("GUEST_PLUGIN_DIR")).join("compiled");
        let runtime = Runtime::with_compile_cache(limits, Some(&cache)).expect("runtime");
        Plugin::load(&runtime, &path).expect("plugin loads")
    })
    .await
    .expect("load task")
}

/// An order the twin handles with `behaviour`.
fn order_doing(id: &str, behaviour: &str) -> Message {
    let mut message = inbox_host_tests::order(id, 7);
    message.payload = serde_json::json!({ "order_id": id, "amount": 7, "do": behaviour })
        .to_string()
        .into_bytes();
    message
}

/// Limits that leave room for a language runtime, with a deadline and
/// memory cap that a runaway guest reaches quickly.
fn limits() -> SandboxLimits {
    SandboxLimits {
        deadline: Duration::from_secs(3),
        memory_bytes: 256 << 20,
        ..SandboxLimits::default()
    }
}

/// Runs one `behaviour` and returns the failure; nothing it wrote is left.
async fn failure(folder: &'static str, behaviour: &str) -> inbox_host::inbox::HandlerError {
    let db = TestDb::start().await;
    let plugin = twin(folder, limits()).await;
    let outcome = runner(&db)
        .process(&order_doing("o-1", behaviour), &plugin)
        .await;
    let Outcome::Failed(error) = outcome else {
        panic!("{folder} {behaviour}: expected a failure, got {outcome:?}")
    };
    assert_eq!(
        (
            db.count("SELECT count(*) FROM invoices").await,
            db.count("SELECT count(*) FROM inbox_host.inbox").await
        ),
        (0, 0),
        "{folder} {behaviour}: the write and the inbox row are rolled back"
    );
    // The runtime is unharmed: the next message on the same plugin is processed.
    assert_eq!(
        runner(&db)
            .process(&order_doing("o-2", "write"), &plugin)
            .await,
        Outcome::Processed,
        "{folder} after {behaviour}"
    );
    error
}

async fn exception_after_write_is_a_crash_named_by_its_message(folder: &'static str) {
    let error = failure(folder, "exception-after-write").await;
    assert_eq!(error.kind, FailureKind::Panic, "{}", error.message);
    assert!(!error.retryable);
    assert!(
        error.message.contains("simulated exception after write"),
        "the exception itself: {}",
        error.message
    );
}

async fn a_handler_error_keeps_its_message_and_retryable(folder: &'static str) {
    let error = failure(folder, "error-after-write").await;
    assert_eq!(error.kind, FailureKind::HandlerError);
    assert!(error.retryable);
    assert!(
        error.message.contains("simulated error after write"),
        "{}",
        error.message
    );
}

async fn a_swallowed_db_error_does_not_commit(folder: &'static str) {
    let error = failure(folder, "swallow-db-error").await;
    assert_eq!(
        error.kind,
        FailureKind::TransactionBroken,
        "{}",
        error.message
    );
    assert!(error.message.contains("42P01"), "{}", error.message);
}

async fn a_runaway_guest_meets_the_deadline_and_the_memory_cap(folder: &'static str) {
    assert_eq!(failure(folder, "loop").await.kind, FailureKind::Deadline);
    assert_eq!(failure(folder, "memory").await.kind, FailureKind::Memory);
}

/// Each probe the twin ran, with how it ended.
async fn probes(folder: &'static str) -> Vec<(String, String)> {
    let db = TestDb::start().await;
    let plugin = twin(folder, limits()).await;
    let outcome = runner(&db)
        .process(&order_doing("probe", "probe"), &plugin)
        .await;
    assert_eq!(outcome, Outcome::Processed);
    sqlx::query_as("SELECT probe, outcome FROM sandbox_probe ORDER BY probe")
        .fetch_all(&db.pool)
        .await
        .expect("probe rows")
}

#[tokio::test]
async fn python_exception_after_write_is_a_crash_named_by_its_message() {
    exception_after_write_is_a_crash_named_by_its_message("sandbox-py").await;
}

#[tokio::test]
async fn javascript_exception_after_write_is_a_crash_named_by_its_message() {
    exception_after_write_is_a_crash_named_by_its_message("sandbox-js").await;
}

#[tokio::test]
async fn python_handler_error_keeps_its_message_and_retryable() {
    a_handler_error_keeps_its_message_and_retryable("sandbox-py").await;
}

#[tokio::test]
async fn javascript_handler_error_keeps_its_message_and_retryable() {
    a_handler_error_keeps_its_message_and_retryable("sandbox-js").await;
}

#[tokio::test]
async fn python_swallowed_db_error_does_not_commit() {
    a_swallowed_db_error_does_not_commit("sandbox-py").await;
}

#[tokio::test]
async fn javascript_swallowed_db_error_does_not_commit() {
    a_swallowed_db_error_does_not_commit("sandbox-js").await;
}

#[tokio::test]
async fn python_runaway_guest_meets_the_deadline_and_the_memory_cap() {
    a_runaway_guest_meets_the_deadline_and_the_memory_cap("sandbox-py").await;
}

#[tokio::test]
async fn javascript_runaway_guest_meets_the_deadline_and_the_memory_cap() {
    a_runaway_guest_meets_the_deadline_and_the_memory_cap("sandbox-js").await;
}

#[tokio::test]
async fn python_cannot_read_files_list_directories_see_the_environment_or_open_sockets() {
    let seen = probes("sandbox-py").await;
    let names: Vec<&str> = seen.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        names,
        [
            "dir-list",
            "env-count",
            "env-home",
            "file-read",
            "tcp-connect"
        ]
    );
    for (probe, outcome) in &seen {
        assert!(
            outcome.starts_with("denied:"),
            "{probe} was not denied: {outcome}"
        );
    }
}

#[tokio::test]
async fn javascript_cannot_see_the_environment_or_fetch() {
    let seen = probes("sandbox-js").await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].0, "env-count");
    assert!(seen[0].1.starts_with("denied:"), "{seen:?}");

    // fetch exists in StarlingMonkey; nothing reaches a listener through it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    listener.set_nonblocking(true).expect("non-blocking");
    let db = TestDb::start().await;
    let plugin = twin("sandbox-js", limits()).await;
    let mut message = order_doing("fetch", "fetch");
    message.payload = serde_json::json!({
        "do": "fetch",
        "url": format!("http://{}/", listener.local_addr().expect("address")),
    })
    .to_string()
    .into_bytes();
    let outcome = runner(&db).process(&message, &plugin).await;
    let accepted = listener.accept();
    assert!(
        matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the guest connected ({outcome:?}): {accepted:?}"
    );
}

/// `inbox-host new --lang <lang>` then `inbox-host build`: the scaffold builds
/// and passes the check as generated.
fn scaffold_builds(lang: &str) {
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path().join(format!("hello-{lang}"));
    let dir_arg = dir.to_str().expect("UTF-8 path");
    let created = inbox_host_tests::host::run(&["new", "--lang", lang, dir_arg], &[]);
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    // Rust scaffolds share one target folder across runs (they vendor the same SDK).
    let target = PathBuf::from(env!("GUEST_PLUGIN_DIR")).join("scaffold-target");
    let built = inbox_host_tests::host::run(
        &["build", dir_arg],
        &[("CARGO_TARGET_DIR", target.to_str().expect("UTF-8 path"))],
    );
    let stdout = String::from_utf8_lossy(&built.stdout);
    assert!(
        built.status.success() && stdout.contains("digest: sha256:"),
        "{stdout}{}",
        String::from_utf8_lossy(&built.stderr)
    );
    assert!(dir.join(format!("hello-{lang}.wasm")).is_file(), "{stdout}");
}

#[test]
fn a_new_rust_plugin_builds_and_passes_the_check() {
    scaffold_builds("rust");
}

#[test]
fn a_new_python_plugin_builds_and_passes_the_check() {
    scaffold_builds("python");
}

#[test]
fn a_new_javascript_plugin_builds_and_passes_the_check() {
    scaffold_builds("js");
}

#[test]
fn a_new_typescript_plugin_builds_and_passes_the_check() {
    scaffold_builds("ts");
}

#[test]
fn a_typescript_type_error_fails_the_build_with_tsc_saying_where() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = scratch.path().join("typo");
    std::fs::create_dir(&dir).expect("folder");
    std::fs::write(
        dir.join("handler.ts"),
        "import type { Db, Event } from \"inbox-guest\";\n\
         export function handle(event: Event, db: Db): void {\n\
           db.execute(\"SELECT 1\", [event.mesageId]);\n\
         }\n",
    )
    .expect("handler");
    let built = inbox_host_tests::host::run(&["build", dir.to_str().expect("UTF-8 path")], &[]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&built.stdout),
        String::from_utf8_lossy(&built.stderr)
    );
    assert!(!built.status.success(), "{said}");
    assert!(
        said.contains("handler.ts(3,") && said.contains("mesageId"),
        "tsc names the place and the property: {said}"
    );
}

#[test]
fn a_folder_without_a_plugin_is_refused_naming_what_it_looks_for() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let built = inbox_host_tests::host::run(
        &["build", scratch.path().to_str().expect("UTF-8 path")],
        &[],
    );
    let stderr = String::from_utf8_lossy(&built.stderr);
    assert!(!built.status.success());
    assert!(
        stderr.contains("handler.py") && stderr.contains("inbox-host new"),
        "{stderr}"
    );
}

/// The markers `remember` wrote, in message order.
async fn remembered(db: &TestDb, ids: &[&str]) -> Vec<String> {
    let mut markers = Vec::new();
    for id in ids {
        let marker: String =
            sqlx::query_scalar("SELECT marker FROM invoices WHERE message_id = $1")
                .bind(id)
                .fetch_one(&db.pool)
                .await
                .expect("invoice");
        markers.push(marker);
    }
    markers
}

#[tokio::test]
async fn a_reused_instance_keeps_its_globals_until_a_message_fails() {
    let db = TestDb::start().await;
    let reused = twin(
        "sandbox-py",
        SandboxLimits {
            reuse_instance: true,
            ..limits()
        },
    )
    .await;
    let runner = runner(&db);
    for id in ["r-1", "r-2"] {
        assert_eq!(
            runner.process(&order_doing(id, "remember"), &reused).await,
            Outcome::Processed
        );
    }
    let failed = runner
        .process(&order_doing("r-3", "exception-after-write"), &reused)
        .await;
    assert!(matches!(failed, Outcome::Failed(_)), "{failed:?}");
    assert_eq!(
        runner
            .process(&order_doing("r-4", "remember"), &reused)
            .await,
        Outcome::Processed
    );
    assert_eq!(
        remembered(&db, &["r-1", "r-2", "r-4"]).await,
        ["seen-1", "seen-2", "seen-1"],
        "globals carry over; after a failure the instance is a fresh one"
    );

    let fresh = twin("sandbox-py", limits()).await;
    for id in ["f-1", "f-2"] {
        assert_eq!(
            runner.process(&order_doing(id, "remember"), &fresh).await,
            Outcome::Processed
        );
    }
    assert_eq!(remembered(&db, &["f-1", "f-2"]).await, ["seen-1", "seen-1"]);
}

/// A Python or JavaScript handler publishes like a Rust one: the message is a
/// row of its transaction, with the derived id; a topic the host does not allow
/// fails the record for good, naming the flag, and leaves nothing behind.
async fn publishes_in_its_transaction(folder: &'static str) {
    use inbox_host::inbox::outgoing_message_id;
    use inbox_host::plugin::PublishLimits;
    let db = TestDb::start().await;
    let plugin = twin(
        folder,
        SandboxLimits {
            publish: PublishLimits {
                topics: vec!["invoices-created".into()],
                ..PublishLimits::default()
            },
            ..limits()
        },
    )
    .await;
    let runner = runner(&db);
    let order = inbox_host_tests::order("o-1", 7);
    assert_eq!(runner.process(&order, &plugin).await, Outcome::Processed);
    let (topic, key, message_id, payload): (String, Vec<u8>, String, Vec<u8>) =
        sqlx::query_as("SELECT topic, message_key, message_id, payload FROM inbox_host.outbox")
            .fetch_one(&db.pool)
            .await
            .expect("one outbox row");
    assert_eq!(topic, "invoices-created");
    assert_eq!(key, b"o-1");
    assert_eq!(message_id, outgoing_message_id("billing", "o-1", 0));
    let body: serde_json::Value = serde_json::from_slice(&payload).expect("json");
    assert_eq!(body["invoice_of"], "o-1");

    let mut elsewhere = inbox_host_tests::order("o-2", 1);
    elsewhere.payload = br#"{"order_id": "o-2", "amount": 1, "publish_to": "payments"}"#.to_vec();
    let Outcome::Failed(error) = runner.process(&elsewhere, &plugin).await else {
        panic!("a refused publication fails the record");
    };
    assert_eq!(error.kind, FailureKind::PublishRule, "{error:?}");
    assert!(!error.retryable);
    assert!(
        error.message.contains("--publish-topic payments"),
        "{}",
        error.message
    );
    assert_eq!(db.count("SELECT count(*) FROM inbox_host.outbox").await, 1);
    assert_eq!(db.count("SELECT count(*) FROM invoices").await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_handler_publishes_in_its_transaction() {
    publishes_in_its_transaction("publish-py").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_javascript_handler_publishes_in_its_transaction() {
    publishes_in_its_transaction("publish-js").await;
}
