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
            .contains("was built against inbox:host@0.1.0, and this host speaks inbox:host@0.3.1, inbox:host@0.3.0 and inbox:host@0.2.0")
            && stderr.contains("rebuild it with the inbox-guest SDK"),
        "{stderr}"
    );
}

/// A handler that imports an interface the host does not link (here
/// `wasi:keyvalue`): the refusal names the import and what the host provides.
#[test]
fn a_component_importing_an_interface_the_host_lacks_is_told_which() {
    let path = crate::components::from_wat(
        "imports-keyvalue",
        r#"(module
            (import "wasi:keyvalue/store@0.2.0" "open" (func $open (result i32)))
            (memory (export "memory") 1)
            (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 16))
            (func (export "handle")
                (param i32 i32 i32 i32 i32 i64 i32 i32 i32 i32 i32 i32 i32) (result i32)
                (drop (call $open))
                (i32.const 0)))"#,
        &[
            (
                "keyvalue.wit",
                "package wasi:keyvalue@0.2.0;\ninterface store { open: func() -> u32; }\n",
            ),
            (
                "kv.wit",
                "package test:kv;\nworld handler-with-keyvalue {\n  include inbox:host/handler@0.3.1;\n  import wasi:keyvalue/store@0.2.0;\n}\n",
            ),
        ],
        "handler-with-keyvalue",
    );
    let (ok, _, stderr) = check(&path);
    let _ = std::fs::remove_file(&path);
    assert!(!ok);
    assert!(
        stderr.contains("it imports wasi:keyvalue/store@0.2.0, which this host does not provide")
            && stderr.contains("`wasi:http` through the host's gate"),
        "{stderr}"
    );
}

#[test]
fn a_component_using_the_async_abi_is_told_to_build_with_sync() {
    // What componentize-qjs builds by default: a component using the component
    // model's async ABI (here reduced to one async built-in).
    let component = wat::parse_str(
        r#"(component
            (core func $cancel (canon task.cancel))
        )"#,
    )
    .expect("component text");
    let path = std::env::temp_dir().join(format!("async-abi-{}.wasm", std::process::id()));
    std::fs::write(&path, component).expect("write component");
    let (ok, _, stderr) = check(&path);
    let _ = std::fs::remove_file(&path);
    assert!(!ok);
    assert!(
        stderr.contains("async") && stderr.contains("build with `--sync`"),
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

/// Every file under `dir`, with its bytes.
fn files_in(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("read");
                files.push((path, bytes));
            }
        }
    }
    files
}

#[test]
fn check_leaves_the_plugin_compiled_in_the_cache_and_a_damaged_entry_is_compiled_again() {
    let cache = tempfile::tempdir().expect("tempdir");
    let billing = plugin("billing");
    let check_cached = || {
        host::run(
            &[
                "check",
                billing.to_str().expect("path"),
                "--compile-cache",
                cache.path().to_str().expect("path"),
            ],
            &[],
        )
    };
    let first = check_cached();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let entries = files_in(cache.path());
    let compiled: Vec<_> = entries
        .iter()
        .filter(|(_, bytes)| bytes.len() > 1024)
        .collect();
    assert!(
        !compiled.is_empty(),
        "nothing compiled in the cache: {entries:?}"
    );

    for (path, _) in &compiled {
        std::fs::write(path, b"not compiled code").expect("damage");
    }
    let second = check_cached();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    for (path, _) in &compiled {
        let now = std::fs::read(path).expect("entry");
        assert!(
            now.len() > 1024,
            "{} was not compiled again",
            path.display()
        );
    }
}

#[test]
fn with_the_compile_cache_off_nothing_is_written() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = host::run(
        &["check", plugin("billing").to_str().expect("path")],
        &[
            ("INBOX_COMPILE_CACHE", "off"),
            ("XDG_CACHE_HOME", home.path().to_str().expect("path")),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(files_in(home.path()).is_empty());
}
