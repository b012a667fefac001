//! `inbox-host new --lang L <dir>`: a plugin that builds and passes `check` as
//! generated, writing one row per message into a table the README of the
//! folder describes.

use std::path::Path;

use anyhow::{bail, Context};

use super::{sources, Language};

/// The table every scaffolded handler writes to.
const TABLE: &str = "CREATE TABLE received (message_id text PRIMARY KEY, topic text, payload text);
GRANT INSERT ON received TO inbox_guest;";

const INSERT: &str = "INSERT INTO received (message_id, topic, payload) VALUES ($1, $2, $3)";

/// Writes a new plugin in `language` into `dir` (created; must be empty).
pub fn scaffold(language: Language, dir: &Path) -> anyhow::Result<()> {
    if dir.exists()
        && std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .next()
            .is_some()
    {
        bail!(
            "{} is not empty: `new` only writes into a new or empty folder",
            dir.display()
        );
    }
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| !n.is_empty())
        .unwrap_or("handler")
        .to_string();
    let readme = readme(language, &name);
    let mut files: Vec<(String, String)> = vec![("README.md".into(), readme)];
    match language {
        Language::Rust => {
            files.push(("Cargo.toml".into(), cargo_toml(&name)));
            files.push((
                "src/lib.rs".into(),
                RUST_HANDLER.replace("{INSERT}", INSERT),
            ));
            let (wit_file, wit_text) = sources::WIT;
            files.push((format!("wit/{wit_file}"), wit_text.into()));
            for (path, text) in sources::RUST_SDK {
                files.push(((*path).into(), (*text).into()));
            }
        }
        Language::Python => {
            files.push((
                "handler.py".into(),
                PYTHON_HANDLER.replace("{INSERT}", INSERT),
            ));
        }
        Language::JavaScript => {
            files.push(("handler.js".into(), JS_HANDLER.replace("{INSERT}", INSERT)));
            files.extend(editor_types(true));
        }
        Language::TypeScript => {
            files.push(("handler.ts".into(), TS_HANDLER.replace("{INSERT}", INSERT)));
            files.extend(editor_types(false));
        }
    }
    let borrowed: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    sources::write_all(dir, &borrowed)
}

/// The SDK's types and a `tsconfig.json` pointing `inbox-guest` at them, so an
/// editor checks the handler as `build` will (`build` uses its own copy).
fn editor_types(javascript: bool) -> Vec<(String, String)> {
    let (_, types) = sources::JS_SDK
        .iter()
        .find(|(path, _)| path.ends_with(".d.ts"))
        .expect("the SDK has types");
    let config = serde_json::json!({
        "compilerOptions": {
            "strict": true, "noEmit": true, "target": "es2022", "module": "es2022",
            "moduleResolution": "bundler", "checkJs": javascript, "allowJs": javascript,
            "paths": { "inbox-guest": ["./inbox-guest.d.ts"] },
        },
        "include": [if javascript { "handler.js" } else { "handler.ts" }],
    });
    vec![
        ("inbox-guest.d.ts".into(), (*types).into()),
        (
            "tsconfig.json".into(),
            serde_json::to_string_pretty(&config).expect("JSON") + "\n",
        ),
    ]
}

fn readme(language: Language, name: &str) -> String {
    format!(
        "# {name}\n\nAn inbox-host handler in {lang}. Each message inserts a row into `received`:\n\n\
         ```sql\n{TABLE}\n```\n\n\
         Build and check it:\n\n```sh\ninbox-host build .\n```\n\n\
         then run it with `inbox-host --plugin {name}.wasm --group <group> --topic <topic>`.\n",
        lang = language.name(),
    )
}

fn cargo_toml(name: &str) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2021"

[lib]
crate-type = ["cdylib"]

[dependencies]
# The SDK, vendored by `inbox-host new` (its bindings read ../wit).
inbox-guest = {{ path = "inbox-guest" }}

# A workspace of its own, so a parent folder's workspace does not claim it.
[workspace]

[profile.release]
opt-level = "s"
lto = true
strip = true
"#
    )
}

const RUST_HANDLER: &str = r#"use inbox_guest::{Db, Event, HandlerError};

inbox_guest::handler!(handle);

fn handle(event: &Event, db: &Db) -> Result<(), HandlerError> {
    let payload = event.payload_str()?;
    db.execute(
        "{INSERT}",
        &[event.message_id.as_str().into(), event.topic.as_str().into(), payload.into()],
    )?;
    Ok(())
}
"#;

const PYTHON_HANDLER: &str = r#"from inbox_guest import Db, Event


def handle(event: Event, db: Db) -> None:
    db.execute(
        "{INSERT}",
        [event.message_id, event.topic, event.text()],
    )
"#;

const JS_HANDLER: &str = r#"/** @param {import("inbox-guest").Event} event @param {import("inbox-guest").Db} db */
export function handle(event, db) {
  db.execute("{INSERT}", [event.messageId, event.topic, event.text()]);
}
"#;

const TS_HANDLER: &str = r#"import type { Db, Event } from "inbox-guest";

export function handle(event: Event, db: Db): void {
  db.execute("{INSERT}", [event.messageId, event.topic, event.text()]);
}
"#;
