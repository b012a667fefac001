use std::sync::{Arc, RwLock};

use super::loader::Plugin;

/// The plugin version new messages start on. A message in flight keeps the
/// `Arc` it started with, so a swap takes effect at the next message boundary.
#[derive(Clone)]
pub struct PluginCell {
    current: Arc<RwLock<Arc<Plugin>>>,
}

impl PluginCell {
    pub fn new(plugin: Plugin) -> Self {
        Self {
            current: Arc::new(RwLock::new(Arc::new(plugin))),
        }
    }

    /// The active version.
    pub fn current(&self) -> Arc<Plugin> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Makes `plugin` the active version; returns the one it replaced.
    pub fn replace(&self, plugin: Plugin) -> Arc<Plugin> {
        let mut slot = self.current.write().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *slot, Arc::new(plugin))
    }
}
