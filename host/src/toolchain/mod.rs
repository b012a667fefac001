//! Plugins from source: `inbox-host build <dir>` finds a plugin folder's
//! language, installs the pinned toolchain it needs on first use, and runs it
//! with the flags the host needs (docs/plugins.md); `inbox-host new` scaffolds
//! a plugin that builds and passes `check` as generated.
//!
//! Nothing here loads or runs a plugin: `app` checks what was built.

mod install;
mod javascript;
mod python;
mod rust;
mod scaffold;
mod sources;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

pub use scaffold::scaffold;

/// The languages a plugin can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    Rust,
    Python,
    #[value(name = "js")]
    JavaScript,
    #[value(name = "ts")]
    TypeScript,
}

impl Language {
    /// The language of the plugin in `dir`, from the file that marks it.
    pub fn of(dir: &Path) -> anyhow::Result<Self> {
        let marks = [
            ("Cargo.toml", Self::Rust),
            ("handler.py", Self::Python),
            ("handler.ts", Self::TypeScript),
            ("handler.js", Self::JavaScript),
        ];
        let found: Vec<_> = marks
            .iter()
            .filter(|(file, _)| dir.join(file).is_file())
            .collect();
        match found.as_slice() {
            [(_, language)] => Ok(*language),
            [] if !dir.is_dir() => bail!("{} is not a folder", dir.display()),
            [] => bail!(
                "{} holds no plugin: expected Cargo.toml (Rust), handler.py (Python), \
                 handler.js (JavaScript) or handler.ts (TypeScript); \
                 `inbox-host new --lang <rust|python|js|ts> <dir>` makes one",
                dir.display()
            ),
            several => bail!(
                "{} holds more than one plugin ({}); keep one per folder",
                dir.display(),
                several
                    .iter()
                    .map(|(file, _)| *file)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Rust => "Rust",
            Self::Python => "Python",
            Self::JavaScript => "JavaScript",
            Self::TypeScript => "TypeScript",
        }
    }
}

/// Where a build puts its component: `output`, or `<dir>/<folder name>.wasm`.
pub fn output_path(dir: &Path, output: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(output) = output {
        return Ok(output.to_path_buf());
    }
    let dir = dir
        .canonicalize()
        .with_context(|| format!("reading {}", dir.display()))?;
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("plugin");
    Ok(dir.join(format!("{name}.wasm")))
}

/// Builds the plugin in `dir` into the component `output`, installing its
/// toolchain under `toolchains` first if it is not there yet.
pub fn build(dir: &Path, output: &Path, toolchains: &Path) -> anyhow::Result<Language> {
    let language = Language::of(dir)?;
    if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    match language {
        Language::Rust => rust::build(dir, output),
        Language::Python => python::build(dir, output, toolchains),
        Language::JavaScript | Language::TypeScript => {
            javascript::build(dir, output, toolchains, language)
        }
    }
    .with_context(|| {
        format!(
            "building the {} plugin in {}",
            language.name(),
            dir.display()
        )
    })?;
    Ok(language)
}

/// A working folder for building `source`, the same one every time, locked
/// for this build (concurrent builds of one plugin wait for each other).
fn work_dir(toolchains: &Path, source: &Path) -> anyhow::Result<(PathBuf, std::fs::File)> {
    use sha2::{Digest, Sha256};
    let key = hex::encode(Sha256::digest(source.to_string_lossy().as_bytes()));
    let dir = toolchains.join("builds").join(&key[..16]);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let lock = std::fs::File::create(dir.join(".lock"))?;
    lock.lock()
        .context("waiting for another build of the same plugin")?;
    Ok((dir, lock))
}

/// Runs a toolchain command; its output (and its own error messages) go to
/// the user's terminal. A failure names the program.
fn run(command: &mut std::process::Command) -> anyhow::Result<()> {
    let program = Path::new(command.get_program()).file_name().map_or_else(
        || "the toolchain".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    // A Rust backtrace from componentize-py would bury the one line that
    // says what is wrong with the plugin.
    command
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0");
    let status = command
        .status()
        .with_context(|| format!("could not start {program} ({command:?})"))?;
    if !status.success() {
        bail!("{program} failed ({status}); what it said is above");
    }
    Ok(())
}
