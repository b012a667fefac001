//! Python plugins: a folder with `handler.py` defining `handle(event, db)`,
//! built by componentize-py with the SDK (`inbox_guest`) against the
//! `handler-calls` world (`wit/calls`), so the SDK's calls have wasi:http bindings.
//! The SDK's `_component` module is the application: it imports `handler`.

use std::path::Path;
use std::process::Command;

use super::install::{self, COMPONENTIZE_PY};
use super::sources;

pub fn build(dir: &Path, output: &Path, toolchains: &Path) -> anyhow::Result<()> {
    let name = install::name_of(&[COMPONENTIZE_PY]);
    let venv = install::ensure(toolchains, &name, "bin/componentize-py", |home| {
        install::python_venv(home, &[COMPONENTIZE_PY])
    })?;
    let sources = sources::unpacked(toolchains)?;
    super::run(
        Command::new(venv.join("bin/componentize-py"))
            .arg("--wit-path")
            .arg(sources.join("wit-calls"))
            .args([
                "--world",
                "handler-calls",
                "componentize",
                "inbox_guest._component",
            ])
            .arg("--python-path")
            .arg(dir)
            .arg("--python-path")
            .arg(sources.join("python"))
            .arg("--output")
            .arg(output),
    )
}
