//! What a guest can reach, and the limits that stop it.

use std::time::Duration;

use inbox_host::inbox::{FailureKind, Outcome};
use inbox_host::plugin::{Plugin, Runtime, SandboxLimits};
use inbox_host_tests::{order, TestDb};

use crate::inbox_core::{load, runner};

async fn probe(db: &TestDb, name: &str) -> String {
    sqlx::query_scalar("SELECT outcome FROM sandbox_probe WHERE probe = $1")
        .bind(name)
        .fetch_one(&db.pool)
        .await
        .unwrap_or_else(|e| panic!("no {name} probe row: {e}"))
}

#[tokio::test]
async fn a_guest_cannot_read_files_list_directories_see_the_environment_or_open_sockets() {
    let db = TestDb::start().await;
    let outcome = runner(&db)
        .process(&order("probe-1", 1), &load("sandbox-probe"))
        .await;
    assert_eq!(outcome, Outcome::Processed);

    for denied in [
        "file-read",
        "dir-list",
        "env-home",
        "env-count",
        "tcp-connect",
    ] {
        let seen = probe(&db, denied).await;
        assert!(
            seen.starts_with("denied:"),
            "{denied} was not denied: {seen}"
        );
    }
    // A deliberate choice (docs/security.md): clocks and random reach nothing
    // outside the process, so they stay available.
    for allowed in ["clock", "random"] {
        let seen = probe(&db, allowed).await;
        assert!(seen.starts_with("allowed:"), "{allowed}: {seen}");
    }
}

/// Runs `plugin` once under `limits` and returns how it failed. Each test sets
/// the limits it does not test out of the way, so a loaded machine cannot make
/// another limit fire first.
async fn trap_kind(plugin: &str, limits: SandboxLimits) -> FailureKind {
    let db = TestDb::start().await;
    let runtime = Runtime::new(limits).expect("runtime");
    let guest = Plugin::load(&runtime, &inbox_host_tests::plugin(plugin)).expect("plugin loads");
    let outcome = runner(&db).process(&order("o-1", 1), &guest).await;
    let Outcome::Failed(error) = outcome else {
        panic!("{plugin}: expected a failure, got {outcome:?}")
    };
    assert_eq!(db.count("SELECT count(*) FROM inbox_host.inbox").await, 0);
    // The host is unharmed: the next message on the same runner is processed.
    assert_eq!(
        runner(&db)
            .process(&order("o-2", 1), &load("billing"))
            .await,
        Outcome::Processed
    );
    error.kind
}

#[tokio::test]
async fn an_infinite_loop_is_stopped_by_the_deadline() {
    let limits = SandboxLimits {
        deadline: Duration::from_millis(500),
        ..SandboxLimits::default()
    };
    assert_eq!(
        trap_kind("infinite-loop", limits).await,
        FailureKind::Deadline
    );
}

#[tokio::test]
async fn a_memory_bomb_is_stopped_by_the_memory_cap() {
    assert_eq!(
        trap_kind("memory-bomb", far_deadline()).await,
        FailureKind::Memory
    );
}

#[tokio::test]
async fn unbounded_recursion_is_stopped_by_the_stack_limit() {
    assert_eq!(
        trap_kind("deep-recursion", far_deadline()).await,
        FailureKind::Stack
    );
}

fn far_deadline() -> SandboxLimits {
    SandboxLimits {
        deadline: Duration::from_secs(120),
        memory_bytes: 32 << 20,
        ..SandboxLimits::default()
    }
}

/// A component whose core module has two linear memories of 60 MiB each: each
/// is under the 64 MiB cap, together they are not. No Rust guest can be built
/// this way, so it is assembled from WebAssembly text and the host's WIT.
fn two_memories_of_60_mib() -> std::path::PathBuf {
    crate::components::from_wat(
        "two-memories",
        r#"(module
            (memory (export "memory") 960)
            (memory $second 960)
            (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 16))
            (func (export "handle")
                (param i32 i32 i32 i32 i32 i64 i32 i32 i32 i32 i32 i32 i32) (result i32)
                (i32.const 0)))"#,
        &[],
        "handler",
    )
}

#[tokio::test]
async fn the_memory_cap_covers_all_memories_of_a_guest_together() {
    let db = TestDb::start().await;
    let limits = SandboxLimits {
        memory_bytes: 64 << 20,
        ..far_deadline()
    };
    let runtime = Runtime::new(limits).expect("runtime");
    let path = two_memories_of_60_mib();
    let plugin = Plugin::load(&runtime, &path).expect("loads");
    let _ = std::fs::remove_file(&path);
    let outcome = runner(&db).process(&order("o-1", 1), &plugin).await;
    let Outcome::Failed(error) = outcome else {
        panic!("expected a failure, got {outcome:?}")
    };
    assert_eq!(error.kind, FailureKind::Memory, "{error:?}");
    assert_eq!(db.count("SELECT count(*) FROM inbox_host.inbox").await, 0);
}
