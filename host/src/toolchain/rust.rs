//! Rust plugins: a `cdylib` crate using the `inbox-guest` SDK, built by cargo
//! for `wasm32-wasip2`. The component cargo reports is copied to the output.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

pub fn build(dir: &Path, output: &Path) -> anyhow::Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut child = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--message-format=json-render-diagnostics",
            "--manifest-path",
        ])
        .arg(dir.join("Cargo.toml"))
        .stdout(Stdio::piped())
        .spawn()
        .context("could not start cargo: Rust plugins need a Rust toolchain (rustup.rs)")?;
    let stdout = child.stdout.take().context("cargo's output")?;
    let mut built: Vec<PathBuf> = Vec::new();
    for line in BufReader::new(stdout).lines() {
        built.extend(components_in(&line?));
    }
    let status = child.wait()?;
    if !status.success() {
        bail!(
            "cargo build failed ({status}); if it says the target is not installed, \
             run `rustup target add wasm32-wasip2`"
        );
    }
    match built.as_slice() {
        [component] => {
            std::fs::copy(component, output).with_context(|| {
                format!("copying {} to {}", component.display(), output.display())
            })?;
            Ok(())
        }
        [] => bail!(
            "cargo built no .wasm: a plugin crate needs `crate-type = [\"cdylib\"]` under [lib]"
        ),
        several => bail!(
            "cargo built several components ({}): build one plugin crate per folder",
            several
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The `.wasm` files of a `compiler-artifact` message of cargo's JSON output.
fn components_in(line: &str) -> Vec<PathBuf> {
    let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
        return Vec::new();
    };
    if message["reason"] != "compiler-artifact" {
        return Vec::new();
    }
    let is_cdylib = message["target"]["kind"]
        .as_array()
        .is_some_and(|kinds| kinds.iter().any(|k| k == "cdylib"));
    if !is_cdylib {
        return Vec::new();
    }
    message["filenames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str())
        .filter(|f| f.ends_with(".wasm"))
        .map(PathBuf::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::components_in;

    #[test]
    fn only_the_cdylib_wasm_of_an_artifact_message_counts() {
        let cdylib = r#"{"reason":"compiler-artifact","target":{"kind":["cdylib"]},"filenames":["/t/billing.wasm","/t/billing.d"]}"#;
        let lib = r#"{"reason":"compiler-artifact","target":{"kind":["lib"]},"filenames":["/t/libserde.rlib"]}"#;
        assert_eq!(
            components_in(cdylib),
            vec![std::path::PathBuf::from("/t/billing.wasm")]
        );
        assert!(components_in(lib).is_empty());
        assert!(components_in("Compiling x").is_empty());
    }
}
