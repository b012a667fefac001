//! JavaScript and TypeScript plugins: `handler.js` or `handler.ts` exporting
//! `handle(event, db)`, bundled with the SDK (`inbox-guest`) by esbuild
//! (TypeScript is type-checked by `tsc --strict` first) and turned into a
//! component by componentize-js (StarlingMonkey) with its `http` feature, so
//! `fetch()` goes out through wasi:http and the host's gate, and without its
//! fetch-event one (a handler serves no HTTP).

use std::path::Path;
use std::process::Command;

use super::install::{self, JS_PACKAGES};
use super::{sources, Language};

pub fn build(
    dir: &Path,
    output: &Path,
    toolchains: &Path,
    language: Language,
) -> anyhow::Result<()> {
    let prefix = install::ensure(
        toolchains,
        &install::name_of(JS_PACKAGES),
        "node_modules/.bin/componentize-js",
        |home| install::npm_prefix(home, JS_PACKAGES),
    )?;
    let bin = prefix.join("node_modules/.bin");
    let sources = sources::unpacked(toolchains)?;
    let sdk = sources.join("js/inbox-guest");
    let handler = dir
        .join(match language {
            Language::TypeScript => "handler.ts",
            _ => "handler.js",
        })
        .canonicalize()?;
    // Named by the plugin's folder, not random: the bundle records its paths,
    // and the same plugin should build to the same bytes.
    let (scratch, _lock) = super::work_dir(toolchains, &handler)?;
    if language == Language::TypeScript {
        let config = scratch.join("tsconfig.json");
        let settings = serde_json::json!({
            "compilerOptions": {
                "strict": true, "noEmit": true, "target": "es2022", "module": "es2022",
                "moduleResolution": "bundler", "skipLibCheck": true, "types": [],
                "paths": { "inbox-guest": [sdk.join("index.d.ts")] },
            },
            "files": [handler],
        });
        std::fs::write(&config, settings.to_string())?;
        super::run(Command::new(bin.join("tsc")).arg("--project").arg(&config))?;
    }
    // The component's export: the SDK wraps the plugin's `handle`.
    let entry = scratch.join("entry.js");
    std::fs::write(
        &entry,
        format!(
            "import {{ handle as plugin }} from {handler};\n\
             import {{ run }} from \"inbox-guest\";\n\
             export function handle(event) {{ return run(event, plugin); }}\n",
            handler = serde_json::Value::from(handler.to_string_lossy()),
        ),
    )?;
    let bundle = scratch.join("bundle.js");
    super::run(
        Command::new(bin.join("esbuild"))
            .arg(&entry)
            .args([
                "--bundle",
                "--format=esm",
                "--platform=neutral",
                "--log-level=warning",
            ])
            .arg("--external:inbox:host/*")
            .arg(format!(
                "--alias:inbox-guest={}",
                sdk.join("index.js").display()
            ))
            .arg(format!("--outfile={}", bundle.display())),
    )?;
    super::run(
        Command::new(bin.join("componentize-js"))
            .arg(&bundle)
            .arg("--wit")
            .arg(sources.join("wit"))
            .args(["--world-name", "handler", "--disable", "fetch-event"])
            .arg("--out")
            .arg(output),
    )
}
