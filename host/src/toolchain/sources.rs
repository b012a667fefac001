//! The files a build needs beside the plugin's own, carried in the binary so an
//! installed `inbox-host` builds plugins without this repository: the WIT worlds
//! and the Python and JavaScript SDKs.

use std::path::{Path, PathBuf};

use anyhow::Context;
use sha2::{Digest, Sha256};

/// `wit/inbox.wit`.
pub const WIT: (&str, &str) = ("inbox.wit", include_str!("../../../wit/inbox.wit"));

/// `wit/calls/`: the `handler` world with the standard `wasi:http` outgoing
/// handler, as a folder of its own whose `deps/` hold `inbox.wit` and WASI.
pub const CALLS_WIT: &[(&str, &str)] = &[
    ("world.wit", include_str!("../../../wit/calls/world.wit")),
    ("deps/inbox.wit", WIT.1),
    (
        "deps/cli.wit",
        include_str!("../../../wit/calls/deps/cli.wit"),
    ),
    (
        "deps/clocks.wit",
        include_str!("../../../wit/calls/deps/clocks.wit"),
    ),
    (
        "deps/filesystem.wit",
        include_str!("../../../wit/calls/deps/filesystem.wit"),
    ),
    (
        "deps/http.wit",
        include_str!("../../../wit/calls/deps/http.wit"),
    ),
    (
        "deps/io.wit",
        include_str!("../../../wit/calls/deps/io.wit"),
    ),
    (
        "deps/random.wit",
        include_str!("../../../wit/calls/deps/random.wit"),
    ),
    (
        "deps/sockets.wit",
        include_str!("../../../wit/calls/deps/sockets.wit"),
    ),
];

/// The Python SDK, as `inbox_guest/<file>`.
pub const PYTHON_SDK: &[(&str, &str)] = &[
    (
        "inbox_guest/__init__.py",
        include_str!("../../../guest-sdk/python/inbox_guest/__init__.py"),
    ),
    (
        "inbox_guest/_calls.py",
        include_str!("../../../guest-sdk/python/inbox_guest/_calls.py"),
    ),
    (
        "inbox_guest/_component.py",
        include_str!("../../../guest-sdk/python/inbox_guest/_component.py"),
    ),
    (
        "inbox_guest/_db.py",
        include_str!("../../../guest-sdk/python/inbox_guest/_db.py"),
    ),
    (
        "inbox_guest/_errors.py",
        include_str!("../../../guest-sdk/python/inbox_guest/_errors.py"),
    ),
    (
        "inbox_guest/_event.py",
        include_str!("../../../guest-sdk/python/inbox_guest/_event.py"),
    ),
    (
        "inbox_guest/_outbox.py",
        include_str!("../../../guest-sdk/python/inbox_guest/_outbox.py"),
    ),
    (
        "inbox_guest/_requests.py",
        include_str!("../../../guest-sdk/python/inbox_guest/_requests.py"),
    ),
];

/// The JavaScript/TypeScript SDK, as `inbox-guest/<file>`.
pub const JS_SDK: &[(&str, &str)] = &[
    (
        "inbox-guest/index.js",
        include_str!("../../../guest-sdk/js/inbox-guest/index.js"),
    ),
    (
        "inbox-guest/index.d.ts",
        include_str!("../../../guest-sdk/js/inbox-guest/index.d.ts"),
    ),
];

/// The Rust SDK crate, as a new plugin vendors it (`inbox-guest/<file>`); its
/// bindings read `../wit`, which the scaffold writes beside it.
pub const RUST_SDK: &[(&str, &str)] = &[
    (
        "inbox-guest/Cargo.toml",
        include_str!("../../../guest-sdk/Cargo.toml"),
    ),
    (
        "inbox-guest/src/lib.rs",
        include_str!("../../../guest-sdk/src/lib.rs"),
    ),
    (
        "inbox-guest/src/calls.rs",
        include_str!("../../../guest-sdk/src/calls.rs"),
    ),
    (
        "inbox-guest/src/db.rs",
        include_str!("../../../guest-sdk/src/db.rs"),
    ),
    (
        "inbox-guest/src/error.rs",
        include_str!("../../../guest-sdk/src/error.rs"),
    ),
    (
        "inbox-guest/src/event.rs",
        include_str!("../../../guest-sdk/src/event.rs"),
    ),
    (
        "inbox-guest/src/outbox.rs",
        include_str!("../../../guest-sdk/src/outbox.rs"),
    ),
    (
        "inbox-guest/src/requests.rs",
        include_str!("../../../guest-sdk/src/requests.rs"),
    ),
];

/// The WIT (`wit/`, `wit-calls/`) and the SDKs (`python/`, `js/`) unpacked under
/// `toolchains`, at a path named by their content: builds read them from the
/// same place every time, so the same plugin builds to the same bytes (the
/// toolchains record source paths) and a new host never reads stale SDKs.
pub fn unpacked(toolchains: &Path) -> anyhow::Result<PathBuf> {
    let layout: [(&str, &[(&str, &str)]); 4] = [
        ("wit", &[WIT]),
        ("wit-calls", CALLS_WIT),
        ("python", PYTHON_SDK),
        ("js", JS_SDK),
    ];
    let mut digest = Sha256::new();
    for (folder, files) in &layout {
        for (path, text) in *files {
            digest.update(format!("{folder}/{path}\n{}\n", text.len()));
            digest.update(text);
        }
    }
    let root = toolchains.join(format!("sources-{}", &hex::encode(digest.finalize())[..16]));
    if root.is_dir() {
        return Ok(root);
    }
    std::fs::create_dir_all(toolchains)
        .with_context(|| format!("creating {}", toolchains.display()))?;
    let staging = tempfile::tempdir_in(toolchains)?;
    for (folder, files) in &layout {
        write_all(&staging.path().join(folder), files)?;
    }
    // Another build may have unpacked the same files meanwhile: either copy will do.
    if std::fs::rename(staging.path(), &root).is_err() && !root.is_dir() {
        anyhow::bail!("could not unpack the SDKs into {}", root.display());
    }
    Ok(root)
}

/// Writes `files` (relative path, text) under `root`.
pub fn write_all(root: &Path, files: &[(&str, &str)]) -> anyhow::Result<()> {
    for (relative, text) in files {
        let path = root.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{CALLS_WIT, JS_SDK, PYTHON_SDK, RUST_SDK};

    /// Every file of `folder` (under the repository) is listed in `vendored` as
    /// `prefix/<name>`: a file added and not listed breaks every new plugin.
    fn all_listed(folder: &str, prefix: &str, vendored: &[(&str, &str)]) {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(folder);
        for entry in std::fs::read_dir(&root).expect("the SDK's folder") {
            let name = entry.expect("an entry").file_name();
            let name = name.to_string_lossy();
            if name.starts_with("__") && !name.ends_with(".py") {
                continue; // __pycache__
            }
            let path = format!("{prefix}{name}");
            assert!(
                vendored.iter().any(|(listed, _)| *listed == path),
                "{path} is not listed"
            );
        }
    }

    #[test]
    fn every_file_of_the_rust_sdk_is_vendored() {
        all_listed("guest-sdk/src", "inbox-guest/src/", RUST_SDK);
    }

    #[test]
    fn every_file_of_the_python_and_js_sdks_and_the_calls_world_is_carried() {
        all_listed("guest-sdk/python/inbox_guest", "inbox_guest/", PYTHON_SDK);
        all_listed("guest-sdk/js/inbox-guest", "inbox-guest/", JS_SDK);
        all_listed("wit/calls/deps", "deps/", CALLS_WIT);
    }
}
