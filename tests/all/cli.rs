//! What a new user sees from the command line.

use std::time::Duration;

use inbox_host_tests::{host, plugin, wait_until};

fn stderr_of(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = host::run(args, env);
    assert!(!out.status.success(), "expected failure for {args:?}");
    host::strip_ansi(&String::from_utf8_lossy(&out.stderr))
}

#[test]
fn without_a_plugin_the_host_says_which_flag_or_variable_to_set() {
    let stderr = stderr_of(&["--group", "billing"], &[]);
    assert!(
        stderr.contains("pass --plugin path/to/handler.wasm or set INBOX_PLUGIN"),
        "{stderr}"
    );
}

#[test]
fn without_a_database_the_host_says_to_pass_database_url() {
    let stderr = stderr_of(
        &["--plugin", "billing.wasm", "--group", "billing"],
        &[("INBOX_TOPIC", "orders")],
    );
    assert!(
        stderr.contains("DATABASE_URL is not set: pass --database-url"),
        "{stderr}"
    );
}

#[test]
fn without_a_topic_the_host_says_to_pass_topic() {
    let stderr = stderr_of(&["--plugin", "billing.wasm", "--group", "billing"], &[]);
    assert!(stderr.contains("pass --topic <name>"), "{stderr}");
}

#[test]
fn a_malformed_kafka_option_is_refused_with_an_example() {
    let stderr = stderr_of(
        &[
            "--plugin",
            "b.wasm",
            "--group",
            "g",
            "--kafka-opt",
            "nonsense",
        ],
        &[
            ("INBOX_TOPIC", "orders"),
            ("DATABASE_URL", "postgres://x@127.0.0.1:1/x"),
        ],
    );
    assert!(stderr.contains("is not key=value"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_database_is_named_with_its_cause_without_its_password_and_waited_for_and_sighup_does_not_kill_a_starting_host(
) {
    let billing = plugin("billing");
    let mut host = host::Host::spawn(
        &[
            "--plugin",
            billing.to_str().expect("utf-8"),
            "--group",
            "g",
            "--connect-timeout",
            "2",
        ],
        &[
            ("INBOX_TOPIC", "orders"),
            ("DATABASE_URL", "postgres://app:s3cret@127.0.0.1:1/app"),
        ],
    );
    wait_until(
        "the host says why it cannot connect",
        Duration::from_secs(60),
        || async {
            host.log()
                .contains("cannot connect to PostgreSQL at postgres://app@127.0.0.1:1/app")
        },
    )
    .await;
    let log = host.log();
    assert!(log.to_lowercase().contains("connection refused"), "{log}");
    assert!(!log.contains("s3cret"), "{log}");
    assert!(
        host.is_running(),
        "the host gave up on a database that is only down:\n{log}"
    );
    // A SIGHUP while starting is a reload request for later, not the end.
    host.hangup();
    assert!(
        host.stop(),
        "SIGHUP then SIGTERM while waiting for the database must exit 0:\n{}",
        host.log()
    );
}

#[test]
fn every_local_problem_is_reported_at_once_before_any_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let not_wasm = dir.path().join("handler.wasm");
    std::fs::write(&not_wasm, "this is not wasm").expect("write");
    let stderr = stderr_of(
        &[
            "--plugin",
            not_wasm.to_str().expect("utf-8"),
            "--group",
            "g",
            "--status-addr",
            "256.0.0.1:9464",
            "--kafka-opt",
            "no.such.property=1",
        ],
        &[
            ("INBOX_TOPIC", "orders"),
            ("DATABASE_URL", "postgres://app@127.0.0.1:1/app"),
        ],
    );
    assert!(stderr.contains("is not a WebAssembly file"), "{stderr}");
    assert!(
        stderr.contains("cannot listen on --status-addr 256.0.0.1:9464"),
        "{stderr}"
    );
    assert!(stderr.contains("no.such.property"), "{stderr}");
    assert!(
        !stderr.contains("PostgreSQL"),
        "it tried the database before reporting: {stderr}"
    );
}

#[test]
fn properties_the_host_owns_cannot_be_set_with_kafka_opt() {
    let stderr = stderr_of(
        &[
            "--plugin",
            "b.wasm",
            "--group",
            "g",
            "--kafka-opt",
            "group.id=other",
            "--kafka-opt",
            "enable.auto.commit=true",
        ],
        &[
            ("INBOX_TOPIC", "orders"),
            ("DATABASE_URL", "postgres://x@127.0.0.1:1/x"),
        ],
    );
    assert!(
        stderr.contains("--kafka-opt cannot set group.id (use --group)"),
        "{stderr}"
    );
    assert!(stderr.contains("enable.auto.commit"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn migrate_applies_the_schema_and_says_so() {
    let db = inbox_host_tests::TestDb::start().await;
    db.execute("DROP SCHEMA inbox_host CASCADE").await;
    let url = db.url.clone();
    let out =
        tokio::task::spawn_blocking(move || host::run(&["migrate"], &[("DATABASE_URL", &url)]))
            .await
            .expect("migrate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("migrations applied"));
    assert_eq!(db.count("SELECT count(*) FROM inbox_host.inbox").await, 0);
}

#[test]
fn the_version_names_the_commit_wasmtime_and_librdkafka() {
    let out = host::run(&["--version"], &[]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("inbox-host "), "{stdout}");
    assert!(stdout.contains("commit "), "{stdout}");
    assert!(stdout.contains("wasmtime 48."), "{stdout}");
    assert!(stdout.contains("librdkafka 2."), "{stdout}");
}

#[test]
fn the_readme_and_deploy_guide_name_every_kafka_property_the_host_owns() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for page in ["README.md", "docs/deploy.md"] {
        let text = std::fs::read_to_string(root.join(page)).expect(page);
        for (property, _) in inbox_host::kafka::OWNED_PROPERTIES {
            assert!(
                text.contains(&format!("`{property}`")),
                "{page} does not name `{property}`"
            );
        }
    }
}

#[test]
fn a_publish_topic_that_is_the_dead_letter_topic_is_refused_at_start() {
    let stderr = stderr_of(
        &[
            "--plugin",
            plugin("billing-publish").to_str().expect("utf-8"),
            "--group",
            "g",
            "--publish-topic",
            "orders-dlt",
            "--dead-letter-topic",
            "orders-dlt",
        ],
        &[
            ("INBOX_TOPIC", "orders"),
            ("DATABASE_URL", "postgres://app@127.0.0.1:1/app"),
        ],
    );
    assert!(
        stderr.contains("--publish-topic orders-dlt is also the --dead-letter-topic"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("PostgreSQL"),
        "refused before connecting: {stderr}"
    );
}
