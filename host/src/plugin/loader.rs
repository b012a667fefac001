use std::path::Path;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, ComponentExportIndex};

use super::bindings::HandlerPre;
use super::runtime::Runtime;
use super::state::GuestState;

/// Why a file cannot be used as a handler plugin. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read plugin {path}: {cause}")]
    Read { path: String, cause: std::io::Error },
    #[error("{path} is not a WebAssembly file (it does not start with the `\\0asm` magic bytes); build a plugin with `cargo build --target wasm32-wasip2 --release`")]
    NotWasm { path: String },
    #[error("{path} is a core WebAssembly module, not a component; build it for the wasm32-wasip2 target (or wrap it with `wasm-tools component new`)")]
    CoreModule { path: String },
    #[error("{path} is not a valid WebAssembly component: {reason}")]
    Invalid { path: String, reason: String },
    #[error("{path} does not match the `inbox:host/handler` world (wit/inbox.wit): {reason}; build it against this host's wit/inbox.wit (Rust: the inbox-guest SDK)")]
    WrongWorld { path: String, reason: String },
    #[error("{path} cannot be instantiated in the sandbox: {reason}")]
    Instantiate { path: String, reason: String },
    #[error("{path} was built against {found}, and this host speaks {}: rebuild it with the inbox-guest SDK of this host (docs/wit.md says what changed between versions)", spoken())]
    OtherContract { path: String, found: String },
}

/// The WIT package (and version) plugins are built against: `wit/inbox.wit`.
/// Plugins built against an older one this host still links
/// ([`CONTRACTS`]) run unchanged.
pub const CONTRACT: &str = CONTRACTS[0];

/// The contracts this host speaks, as a sentence lists them.
fn spoken() -> String {
    match CONTRACTS.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}
pub use super::legacy::CONTRACTS;

/// A compiled handler component, checked against the world, ready to instantiate
/// once per message.
pub struct Plugin {
    pub(super) name: String,
    pub(super) digest: String,
    pub(super) pre: HandlerPre<GuestState>,
    /// The `handle` export, called with an event borrowed from the message.
    pub(super) handle_export: ComponentExportIndex,
    pub(super) runtime: Runtime,
    /// Instances kept for their next message (`--reuse-instance`), at most one
    /// per message handled at once.
    pub(super) idle: std::sync::Mutex<Vec<Reusable>>,
}

/// An instance whose message succeeded, with its store, kept for the next one.
pub(super) struct Reusable {
    pub store: wasmtime::Store<GuestState>,
    pub instance: wasmtime::component::Instance,
}

impl Plugin {
    pub(super) fn idle_instance(&self) -> Option<Reusable> {
        if !self.runtime.limits.reuse_instance {
            return None;
        }
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
    }

    pub(super) fn keep_instance(&self, reusable: Reusable) {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(reusable);
    }
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("digest", &self.digest)
            .finish()
    }
}

const WASM_MAGIC: &[u8] = b"\0asm";
const CORE_MODULE_LAYER: [u8; 2] = [0, 0];

impl Plugin {
    /// Reads, compiles and checks a plugin file. Compiling is CPU-heavy: call it
    /// from a blocking context.
    pub fn load(runtime: &Runtime, path: &Path) -> Result<Self, LoadError> {
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|cause| LoadError::Read {
            path: shown.clone(),
            cause,
        })?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| shown.clone());
        Self::from_bytes(runtime, &name, &shown, &bytes)
    }

    /// Reads, compiles and checks a plugin file off the async threads, then
    /// instantiates it once in the sandbox: what every version goes through
    /// before it may run (at start, `check`, `shadow`).
    pub async fn load_checked(runtime: &Runtime, path: &Path) -> anyhow::Result<Self> {
        let (runtime, owned) = (runtime.clone(), path.to_path_buf());
        Ok(Self::checked(tokio::task::spawn_blocking(move || {
            Self::load(&runtime, &owned)
        }))
        .await?)
    }

    /// [`Plugin::from_bytes`] off the async threads, then one instantiation in
    /// the sandbox (a hot swap's candidate).
    pub async fn from_bytes_checked(
        runtime: &Runtime,
        name: String,
        shown: String,
        bytes: Vec<u8>,
    ) -> Result<Self, LoadError> {
        let runtime = runtime.clone();
        Self::checked(tokio::task::spawn_blocking(move || {
            Self::from_bytes(&runtime, &name, &shown, &bytes)
        }))
        .await
    }

    async fn checked(
        compiled: tokio::task::JoinHandle<Result<Self, LoadError>>,
    ) -> Result<Self, LoadError> {
        let plugin = compiled.await.map_err(|join| LoadError::Invalid {
            path: "the plugin".into(),
            reason: format!("compiling it panicked: {join}"),
        })??;
        plugin.check_instantiation().await?;
        Ok(plugin)
    }

    /// Compiles and checks plugin bytes; `shown` names the source in errors.
    pub fn from_bytes(
        runtime: &Runtime,
        name: &str,
        shown: &str,
        bytes: &[u8],
    ) -> Result<Self, LoadError> {
        let path = shown.to_string();
        if bytes.len() < 8 || &bytes[..4] != WASM_MAGIC {
            return Err(LoadError::NotWasm { path });
        }
        if bytes[6..8] == CORE_MODULE_LAYER {
            return Err(LoadError::CoreModule { path });
        }
        // Refused in milliseconds, before a compile that can take a minute for
        // a large (Python, JavaScript) component.
        let missing = unprovided_imports(bytes);
        if !missing.is_empty() {
            let missing: Vec<&str> = missing.iter().map(String::as_str).collect();
            return Err(LoadError::WrongWorld {
                path,
                reason: missing_imports(&missing),
            });
        }
        let component = Component::new(&runtime.engine, bytes).map_err(|e| LoadError::Invalid {
            path: path.clone(),
            reason: with_async_hint(format!("{e:#}")),
        })?;
        if let Some(found) = other_contract(&component, &runtime.engine) {
            return Err(LoadError::OtherContract { path, found });
        }
        let instance_pre =
            runtime
                .linker
                .instantiate_pre(&component)
                .map_err(|e| LoadError::WrongWorld {
                    path: path.clone(),
                    reason: with_import_hint(format!("{e:#}"), &component, &runtime.engine),
                })?;
        let pre = HandlerPre::new(instance_pre).map_err(|e| LoadError::WrongWorld {
            path: path.clone(),
            reason: format!("{e:#}"),
        })?;
        let handle_export =
            component
                .get_export_index(None, "handle")
                .ok_or_else(|| LoadError::WrongWorld {
                    path: path.clone(),
                    reason: "no `handle` export".into(),
                })?;
        Ok(Self {
            name: name.to_string(),
            digest: digest_of(bytes),
            pre,
            handle_export,
            runtime: runtime.clone(),
            idle: std::sync::Mutex::default(),
        })
    }

    /// The plugin's name (its file stem), used to tag its log lines.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `sha256:<hex>` of the component bytes: the version stored on inbox rows.
    /// The runtime it was compiled for (shared by every version of a host).
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    pub fn digest(&self) -> &str {
        &self.digest
    }
}

/// The `inbox:host` package a component imports, when it is a version this host
/// does not link (its imports would fail to link with a message about types).
fn other_contract(component: &Component, engine: &wasmtime::Engine) -> Option<String> {
    let ty = component.component_type();
    let found = ty
        .imports(engine)
        .filter_map(|(name, _)| name.strip_prefix("inbox:host/"))
        .filter_map(|rest| rest.split_once('@').map(|(_, version)| version))
        .map(|version| format!("inbox:host@{version}"))
        .find(|contract| !CONTRACTS.contains(&contract.as_str()));
    found
}

/// Interface families the host links: its own, and WASI's (files, sockets and
/// the environment are linked but deny everything; `wasi:http` goes through the
/// host's gate).
const PROVIDED: &[&str] = &[
    "inbox:host/",
    "wasi:cli/",
    "wasi:clocks/",
    "wasi:filesystem/",
    "wasi:http/",
    "wasi:io/",
    "wasi:random/",
    "wasi:sockets/",
];

/// Names what the component imports that the host does not provide, and how
/// the usual toolchains leave it out.
fn with_import_hint(reason: String, component: &Component, engine: &wasmtime::Engine) -> String {
    let ty = component.component_type();
    let missing: Vec<&str> = ty
        .imports(engine)
        .map(|(name, _)| name)
        .filter(|name| !is_provided(name))
        .collect();
    if missing.is_empty() {
        return reason;
    }
    format!("{reason}; {}", missing_imports(&missing))
}

fn is_provided(import: &str) -> bool {
    PROVIDED.iter().any(|p| import.starts_with(p))
}

/// What to tell the author of a component importing `missing`.
fn missing_imports(missing: &[&str]) -> String {
    format!(
        "it imports {}, which this host does not provide (guests reach the `inbox:host` \
         interfaces, `wasi:http` through the host's gate, and WASI's clocks and random)",
        missing.join(", ")
    )
}

/// The top-level imports of a component that the host does not provide, read
/// from the binary without compiling it (a binary that does not parse is left
/// to the compiler, which says why).
fn unprovided_imports(bytes: &[u8]) -> Vec<String> {
    use wasmparser::{Encoding, Parser, Payload};
    let mut depth = 0usize;
    let mut missing = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        let Ok(payload) = payload else {
            return Vec::new();
        };
        match payload {
            Payload::Version { encoding, .. } => {
                depth += 1;
                if depth == 1 && encoding != Encoding::Component {
                    return Vec::new();
                }
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(imports) if depth == 1 => {
                for import in imports.into_iter().flatten() {
                    // Plain names (`event`, a world's own types) are the
                    // linker's to check; interfaces are `package:name/interface`.
                    let name = import.name.name;
                    if name.contains(':') && !is_provided(name) {
                        missing.push(name.to_owned());
                    }
                }
            }
            _ => {}
        }
    }
    missing
}

/// A component using the component model's async ABI (componentize-qjs's
/// default) is told how to build a synchronous one.
fn with_async_hint(reason: String) -> String {
    if reason.contains("async") {
        format!(
            "{reason}; the host runs components with the synchronous ABI \
             (for componentize-qjs, build with `--sync`)"
        )
    } else {
        reason
    }
}

/// `sha256:<hex>` of plugin bytes.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}
