//! Python plugins: a folder with `handler.py` defining `handle(event, db)`,
//! built by componentize-py with the SDK (`inbox_guest`) and the WIT world.
//! The SDK's `_component` module is the application: it imports `handler`.

use std::path::Path;
use std::process::Command;

use super::install::{self, COMPONENTIZE_PY};
use super::sources;

pub fn build(dir: &Path, output: &Path, toolchains: &Path) -> anyhow::Result<()> {
    let name = COMPONENTIZE_PY.replace("==", "-");
    let venv = install::ensure(toolchains, &name, |home| {
        install::python_venv(home, &[COMPONENTIZE_PY])
    })?;
    let scratch = tempfile::tempdir()?;
    let (wit_file, wit_text) = sources::WIT;
    sources::write_all(&scratch.path().join("wit"), &[(wit_file, wit_text)])?;
    sources::write_all(&scratch.path().join("sdk"), sources::PYTHON_SDK)?;
    super::run(
        Command::new(venv.join("bin/componentize-py"))
            .arg("--wit-path")
            .arg(scratch.path().join("wit"))
            .args(["--world", "handler", "componentize", "inbox_guest._component"])
            .arg("--python-path")
            .arg(dir)
            .arg("--python-path")
            .arg(scratch.path().join("sdk"))
            .arg("--output")
            .arg(output),
    )
}
