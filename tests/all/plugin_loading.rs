//! Files that are not handler plugins are refused at load, by name of the problem,
//! through the real `inbox-host check`.

use inbox_host_tests::{host, plugin};

fn check(path: &std::path::Path) -> (bool, String, String) {
    let out = host::run(&["check", path.to_str().expect("utf-8 path")], &[]);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        host::strip_ansi(&String::from_utf8_lossy(&out.stderr)),
    )
}

#[test]
fn check_accepts_billing_and_prints_its_digest() {
    let (ok, stdout, stderr) = check(&plugin("billing"));
    assert!(ok, "{stderr}");
    let digest = stdout
        .lines()
        .find_map(|l| l.strip_prefix("digest: sha256:"))
        .expect(&stdout);
    let sha256sum = std::process::Command::new("sha256sum")
        .arg(plugin("billing"))
        .output()
        .expect("sha256sum");
    let expected = String::from_utf8_lossy(&sha256sum.stdout);
    assert_eq!(
        Some(digest),
        expected.split_whitespace().next(),
        "the digest is the file's SHA-256"
    );
}

#[test]
fn a_file_that_is_not_wasm_is_refused_as_such() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("billing.wasm");
    std::fs::write(&path, b"#!/bin/sh\necho not wasm\n").expect("write");
    let (ok, _, stderr) = check(&path);
    assert!(!ok);
    assert!(stderr.contains("is not a WebAssembly file"), "{stderr}");
}

#[test]
fn a_core_module_is_refused_as_not_a_component() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("core.wasm");
    std::fs::write(&path, b"\0asm\x01\0\0\0").expect("write");
    let (ok, _, stderr) = check(&path);
    assert!(!ok);
    assert!(
        stderr.contains("core WebAssembly module, not a component"),
        "{stderr}"
    );
}

#[test]
fn a_truncated_component_is_refused_as_invalid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("truncated.wasm");
    let bytes = std::fs::read(plugin("billing")).expect("billing.wasm");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("write");
    let (ok, _, stderr) = check(&path);
    assert!(!ok);
    assert!(
        stderr.contains("is not a valid WebAssembly component"),
        "{stderr}"
    );
}

#[test]
fn a_component_of_another_world_is_refused_naming_the_handler_world() {
    let (ok, _, stderr) = check(&plugin("not-a-handler"));
    assert!(!ok);
    assert!(
        stderr.contains("does not match the `inbox:host/handler` world"),
        "{stderr}"
    );
}

/// A plugin built with the SDK of inbox-host 0.2 (WIT `inbox:host@0.1.0`, kept
/// as a fixture) is refused naming both contract versions, not with a type error.
#[test]
fn a_plugin_built_against_the_previous_contract_is_refused_naming_both_versions() {
    let old = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/sql-runner-built-for-inbox-host-0.1.0.wasm");
    let (ok, _, stderr) = check(&old);
    assert!(!ok);
    assert!(
        stderr
            .contains("was built against inbox:host@0.1.0, and this host speaks inbox:host@0.2.0")
            && stderr.contains("rebuild it with the inbox-guest SDK"),
        "{stderr}"
    );
}

/// What componentize-js builds by default: a handler that also imports
/// `wasi:http`. The refusal names the import and the flag that removes it.
#[test]
fn a_component_importing_wasi_http_is_told_which_import_and_how_to_drop_it() {
    let path = crate::components::from_wat(
        "imports-http",
        r#"(module
            (import "wasi:http/outgoing-handler@0.2.6" "handle" (func $fetch (result i32)))
            (memory (export "memory") 1)
            (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 16))
            (func (export "handle")
                (param i32 i32 i32 i32 i32 i64 i32 i32 i32 i32 i32 i32 i32) (result i32)
                (drop (call $fetch))
                (i32.const 0)))"#,
        &[
            (
                "http.wit",
                "package wasi:http@0.2.6;\ninterface outgoing-handler { handle: func() -> u32; }\n",
            ),
            (
                "js.wit",
                "package test:js;\nworld handler-with-http {\n  include inbox:host/handler@0.2.0;\n  import wasi:http/outgoing-handler@0.2.6;\n}\n",
            ),
        ],
        "handler-with-http",
    );
    let (ok, _, stderr) = check(&path);
    let _ = std::fs::remove_file(&path);
    assert!(!ok);
    assert!(
        stderr.contains(
            "it imports wasi:http/outgoing-handler@0.2.6, which this host does not provide"
        ) && stderr.contains("--disable http fetch-event"),
        "{stderr}"
    );
}

#[test]
fn a_missing_file_is_refused_with_the_path() {
    let (ok, _, stderr) = check(std::path::Path::new("/nonexistent/billing.wasm"));
    assert!(!ok);
    assert!(
        stderr.contains("cannot read plugin /nonexistent/billing.wasm"),
        "{stderr}"
    );
}
