//! Builds the plugins in `plugins/` for wasm32-wasip2 (like Spin's
//! test-components) and tells the tests where they are. A second build of
//! `billing` with another marker gives the hot-swap tests a v2.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let root = manifest_dir
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf();
    for watched in [
        "plugins/Cargo.toml",
        "plugins/Cargo.lock",
        "guest-sdk/src",
        "guest-sdk/Cargo.toml",
        "wit",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    for member in std::fs::read_dir(root.join("plugins"))
        .expect("plugins/ exists")
        .flatten()
    {
        let path = member.path();
        if path.join("Cargo.toml").is_file() {
            println!("cargo:rerun-if-changed={}", path.join("src").display());
            println!(
                "cargo:rerun-if-changed={}",
                path.join("Cargo.toml").display()
            );
        }
    }
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");

    // A target dir of their own: the outer build holds the lock on ours.
    let target_root = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let v1 = target_root.join("wasm-plugins");
    let v2 = target_root.join("wasm-plugins-v2");
    build(&root, &v1, &[], None);
    build(&root, &v2, &["-p", "billing"], Some("billing-v2"));
    println!(
        "cargo:rustc-env=GUEST_PLUGIN_DIR={}",
        target_root.join("guest-plugins").display()
    );
    println!(
        "cargo:rustc-env=PLUGIN_DIR={}",
        v1.join("wasm32-wasip2/release").display()
    );
    println!(
        "cargo:rustc-env=PLUGIN_V2_DIR={}",
        v2.join("wasm32-wasip2/release").display()
    );
}

fn build(root: &Path, target_dir: &Path, extra: &[&str], marker: Option<&str>) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--manifest-path",
        ])
        .arg(root.join("plugins/Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .args(extra)
        // Flags meant for the host build must not leak into the guests'.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_TARGET_DIR");
    match marker {
        Some(m) => command.env("BILLING_MARKER", m),
        None => command.env_remove("BILLING_MARKER"),
    };
    let status = command.status().expect("running cargo for the plugins");
    assert!(
        status.success(),
        "building the plugins for wasm32-wasip2 failed; is the target installed? run scripts/setup \
         (it runs `rustup target add wasm32-wasip2`)"
    );
}
