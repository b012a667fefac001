//! Hot swap: the plugin version new messages start on, and what replaces it
//! when a deploy changes the plugin file (or on SIGHUP).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use notify::{RecursiveMode, Watcher as _};
use tokio::sync::mpsc;

use super::loader::{digest_of, Plugin};
use super::runtime::Runtime;

/// The plugin version new messages start on. A message in flight keeps the
/// `Arc` it started with, so a swap takes effect at the next message boundary.
#[derive(Clone)]
pub struct PluginCell {
    current: Arc<RwLock<Arc<Plugin>>>,
    swaps: Arc<AtomicU64>,
    rejections: Arc<AtomicU64>,
    checks: Arc<AtomicU64>,
}

/// How often the plugin was replaced, new versions were rejected, and the
/// file was checked for a new version (on a file event or SIGHUP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwapCounts {
    pub swaps: u64,
    pub rejections: u64,
    pub checks: u64,
}

impl PluginCell {
    pub fn new(plugin: Plugin) -> Self {
        Self {
            current: Arc::new(RwLock::new(Arc::new(plugin))),
            swaps: Arc::default(),
            rejections: Arc::default(),
            checks: Arc::default(),
        }
    }

    pub fn counts(&self) -> SwapCounts {
        SwapCounts {
            swaps: self.swaps.load(Ordering::Relaxed),
            rejections: self.rejections.load(Ordering::Relaxed),
            checks: self.checks.load(Ordering::Relaxed),
        }
    }

    /// The active version.
    pub fn current(&self) -> Arc<Plugin> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Makes `plugin` the active version; returns the one it replaced.
    pub fn replace(&self, plugin: Plugin) -> Arc<Plugin> {
        let mut slot = self.current.write().unwrap_or_else(|e| e.into_inner());
        self.swaps.fetch_add(1, Ordering::Relaxed);
        std::mem::replace(&mut *slot, Arc::new(plugin))
    }
}

/// Quiet time after the last file event before the file is read: an in-place
/// copy produces several writes.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// Reloads the plugin at `path` into `cell` whenever the file's content changes
/// (watched through its directory, so atomic renames and symlink flips count) or
/// `reload` yields. A new version is compiled, checked against the world and
/// instantiated once before it replaces the old one; a version that fails is
/// rejected with a log line and the old one keeps running.
pub struct Watcher {
    path: PathBuf,
    runtime: Runtime,
    cell: PluginCell,
    /// The digest of the last version rejected: not loaded (nor reported) again.
    rejected: Option<String>,
}

impl Watcher {
    pub fn new(path: &Path, runtime: Runtime, cell: PluginCell) -> Self {
        Self {
            path: path.to_path_buf(),
            runtime,
            cell,
            rejected: None,
        }
    }

    /// Runs until `reload` closes. File events and reload requests both end in
    /// [`Watcher::reload_if_changed`].
    pub async fn run(mut self, mut reload: mpsc::Receiver<()>) {
        let (events_tx, mut events) = mpsc::unbounded_channel();
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let _watcher = match notify::recommended_watcher(
            move |event: notify::Result<notify::Event>| {
                if event.is_ok_and(|e| changes_content(&e.kind)) {
                    let _ = events_tx.send(());
                }
            },
        )
        .and_then(|mut w| w.watch(&dir, RecursiveMode::NonRecursive).map(|()| w))
        {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the plugin's directory; hot swap only on SIGHUP");
                None
            }
        };
        loop {
            tokio::select! {
                request = reload.recv() => {
                    if request.is_none() {
                        return;
                    }
                    tracing::info!("reload requested (SIGHUP)");
                }
                Some(()) = events.recv() => {
                    // Wait until the file has been quiet for a moment.
                    while tokio::time::timeout(DEBOUNCE, events.recv()).await.is_ok_and(|e| e.is_some()) {}
                }
            }
            self.reload_if_changed().await;
        }
    }

    /// Loads the file if its digest differs from the active version's (and
    /// from the last version rejected, which is reported once); counted once
    /// the check is over, whatever it found.
    pub async fn reload_if_changed(&mut self) {
        self.check_file().await;
        self.cell.checks.fetch_add(1, Ordering::Relaxed);
    }

    async fn check_file(&mut self) {
        let path = self.path.clone();
        let Ok(Ok(bytes)) = tokio::task::spawn_blocking(move || std::fs::read(path)).await else {
            tracing::warn!(plugin = %self.path.display(), "plugin file unreadable (mid-deploy?); keeping the active version");
            return;
        };
        let active = self.cell.current();
        let digest = digest_of(&bytes);
        if digest == active.digest() || self.rejected.as_deref() == Some(digest.as_str()) {
            return;
        }
        let (name, shown) = (active.name().to_string(), self.path.display().to_string());
        match Plugin::from_bytes_checked(&self.runtime, name, shown, bytes).await {
            Ok(plugin) => {
                let new = plugin.digest().to_string();
                let old = self.cell.replace(plugin);
                tracing::info!(old = old.digest(), new = %new, "plugin swapped: new messages run on the new version");
            }
            Err(e) => {
                tracing::error!(
                    active = active.digest(),
                    rejected = %digest,
                    reason = %e,
                    "new plugin version rejected; the active version keeps running (said once per version)"
                );
                self.cell.rejections.fetch_add(1, Ordering::Relaxed);
                self.rejected = Some(digest);
            }
        }
    }
}

/// Whether a file event in the plugin's directory can change what the plugin
/// path reads. Reads (the host's own included) cannot; without this filter the
/// watcher's own read of the plugin would trigger the next reload, forever.
fn changes_content(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode};
    use notify::EventKind;
    match kind {
        // A writer closing the file is the end of an in-place copy.
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_) | EventKind::Any => true,
        EventKind::Other => false,
    }
}

#[cfg(test)]
mod tests {
    use notify::event::{AccessKind, AccessMode, CreateKind, DataChange, ModifyKind, RenameMode};
    use notify::EventKind;

    use super::changes_content;

    #[test]
    fn reads_do_not_trigger_a_reload_and_writes_renames_and_creates_do() {
        let reads = [
            EventKind::Access(AccessKind::Open(AccessMode::Read)),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Access(AccessKind::Read),
            EventKind::Other,
        ];
        assert!(reads.iter().all(|k| !changes_content(k)));
        let changes = [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Data(DataChange::Content)),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
        ];
        assert!(changes.iter().all(changes_content));
    }
}
