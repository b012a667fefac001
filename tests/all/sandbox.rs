//! What a guest can reach, and the limits that stop it.

use inbox_host::inbox::{FailureKind, Outcome};
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

async fn trap_kind(plugin: &str) -> FailureKind {
    let db = TestDb::start().await;
    let outcome = runner(&db).process(&order("o-1", 1), &load(plugin)).await;
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
    assert_eq!(trap_kind("infinite-loop").await, FailureKind::Deadline);
}

#[tokio::test]
async fn a_memory_bomb_is_stopped_by_the_memory_cap() {
    assert_eq!(trap_kind("memory-bomb").await, FailureKind::Memory);
}

#[tokio::test]
async fn unbounded_recursion_is_stopped_by_the_stack_limit() {
    assert_eq!(trap_kind("deep-recursion").await, FailureKind::Stack);
}
