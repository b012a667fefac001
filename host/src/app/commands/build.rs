//! `inbox-host migrate`, `check` and `build`: the commands that prepare a
//! database or a plugin without consuming anything.

use anyhow::Context;

use crate::app::database::connect;
use crate::inbox;
use crate::plugin::Plugin;
use crate::plugin::Runtime;

/// Applies the host's migrations.
pub async fn migrate(database_url: &str) -> anyhow::Result<()> {
    let pool = connect(database_url, 2).await?;
    inbox::migrate(&pool).await.context("applying migrations")?;
    Ok(())
}

/// Validates a plugin offline (leaving it compiled in `compile_cache`);
/// returns its digest.
pub async fn check(
    path: &std::path::Path,
    compile_cache: Option<&std::path::Path>,
) -> anyhow::Result<String> {
    let runtime = Runtime::with_compile_cache(Default::default(), compile_cache)?;
    let plugin = Plugin::load_checked(&runtime, path).await?;
    Ok(plugin.digest().to_string())
}

/// `inbox-host build`: builds the plugin folder with its language's toolchain,
/// then checks the component (leaving it compiled in the cache); returns the
/// component's path and digest.
pub async fn build(args: &crate::cli::BuildArgs) -> anyhow::Result<(std::path::PathBuf, String)> {
    let output = crate::toolchain::output_path(&args.source, args.output.as_deref())?;
    let (dir, built, toolchains) = (args.source.clone(), output.clone(), args.toolchains()?);
    tokio::task::spawn_blocking(move || crate::toolchain::build(&dir, &built, &toolchains))
        .await??;
    let digest = check(&output, args.compile_cache.dir().as_deref())
        .await
        .with_context(|| {
            format!(
                "the built component {} does not pass the check",
                output.display()
            )
        })?;
    Ok((output, digest))
}
