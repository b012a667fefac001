//! Pinned toolchains, installed on first use into a folder of their own under
//! the user's cache (never into the system): a Python virtual environment for
//! componentize-py, an npm prefix for componentize-js and its helpers.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

/// The componentize-py release Python plugins are built with.
pub const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";

/// The npm packages JavaScript and TypeScript plugins are built with.
pub const JS_PACKAGES: &[&str] = &[
    "@bytecodealliance/componentize-js@0.23.0",
    "esbuild@0.25.12",
    "typescript@5.9.3",
];

/// A toolchain folder's name spelling out its pinned packages
/// (`componentize-js-0.23.0+esbuild-0.25.12+…`), so changing a pin installs
/// afresh instead of reusing an install of other versions.
pub fn name_of(packages: &[&str]) -> String {
    packages
        .iter()
        .map(|p| {
            p.rsplit('/')
                .next()
                .unwrap_or(p)
                .replace("==", "-")
                .replace('@', "-")
        })
        .collect::<Vec<_>>()
        .join("+")
}

/// The folder of a toolchain named `name`, installed by `install` when it is
/// not there yet or its program `tool` (a path inside it) went missing.
/// Concurrent builds wait for one another's install.
pub fn ensure(
    toolchains: &Path,
    name: &str,
    tool: &str,
    install: impl FnOnce(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<PathBuf> {
    let home = toolchains.join(name);
    let installed = || home.join(".installed").is_file() && home.join(tool).is_file();
    if installed() {
        return Ok(home);
    }
    std::fs::create_dir_all(toolchains)
        .with_context(|| format!("creating {}", toolchains.display()))?;
    let lock = File::create(toolchains.join(format!("{name}.lock")))
        .with_context(|| format!("creating a lock in {}", toolchains.display()))?;
    lock.lock().context("waiting for another install")?;
    if installed() {
        return Ok(home);
    }
    if home.exists() {
        // A half-finished or damaged install: start over.
        std::fs::remove_dir_all(&home).with_context(|| format!("removing {}", home.display()))?;
    }
    eprintln!("installing {name} into {} (once)", home.display());
    install(&home)?;
    File::create(home.join(".installed")).context("marking the install finished")?;
    Ok(home)
}

/// A virtual environment at `home` with `packages` installed by pip.
pub fn python_venv(home: &Path, packages: &[&str]) -> anyhow::Result<()> {
    let python = std::env::var_os("INBOX_PYTHON").unwrap_or_else(|| "python3".into());
    super::run(Command::new(&python).args(["-m", "venv"]).arg(home)).with_context(|| {
        format!(
            "Python plugins are built with componentize-py, installed with {} \
             (3.10 or later, with venv; set INBOX_PYTHON to use another)",
            python.to_string_lossy()
        )
    })?;
    super::run(
        Command::new(home.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(packages),
    )
}

/// `packages` installed by npm under the prefix `home`.
pub fn npm_prefix(home: &Path, packages: &[&str]) -> anyhow::Result<()> {
    std::fs::create_dir_all(home).with_context(|| format!("creating {}", home.display()))?;
    super::run(
        Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix"])
            .arg(home)
            .args(packages),
    )
    .context("JavaScript and TypeScript plugins are built with npm packages: install Node.js 20 or later with npm")
}

#[cfg(test)]
mod tests {
    use super::name_of;

    #[test]
    fn a_toolchain_folder_names_every_pinned_version() {
        assert_eq!(
            name_of(&["componentize-py==0.25.1"]),
            "componentize-py-0.25.1"
        );
        assert_eq!(
            name_of(&[
                "@bytecodealliance/componentize-js@0.23.0",
                "esbuild@0.25.12"
            ]),
            "componentize-js-0.23.0+esbuild-0.25.12"
        );
    }
}
