//! What a new user sees from the command line.

use inbox_host_tests::host;

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

#[test]
fn an_unreachable_database_is_named_without_its_password() {
    let stderr = stderr_of(
        &["--plugin", "b.wasm", "--group", "g"],
        &[
            ("INBOX_TOPIC", "orders"),
            ("DATABASE_URL", "postgres://app:s3cret@127.0.0.1:1/app"),
        ],
    );
    assert!(
        stderr.contains("cannot connect to PostgreSQL at postgres://app@127.0.0.1:1/app"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");
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
