//! Components no language toolchain here builds (two memories, a `wasi:http`
//! import), assembled from WebAssembly text and WIT with `wit-component`.

use std::path::{Path, PathBuf};

/// Encodes the core module `core` (WebAssembly text) as a component of `world`,
/// resolved from the host's `wit/` plus `extra` WIT packages (file name,
/// source); writes it to a temporary file named after `name`.
pub fn from_wat(name: &str, core: &str, extra: &[(&str, &str)], world: &str) -> PathBuf {
    let mut resolve = wit_parser::Resolve::default();
    let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
    let (mut package, _) = resolve.push_dir(&wit).expect("the host's WIT");
    for (file, source) in extra {
        package = resolve.push_str(file, source).expect("extra WIT");
    }
    let world = resolve
        .select_world(&[package], Some(world))
        .expect("the world");
    let mut module = wat::parse_str(core).expect("valid text");
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .expect("metadata");
    let component = wit_component::ComponentEncoder::default()
        .module(&module)
        .expect("module")
        .validate(true)
        .encode()
        .expect("component");
    let path = std::env::temp_dir().join(format!("{name}-{}.wasm", std::process::id()));
    std::fs::write(&path, component).expect("write component");
    path
}
