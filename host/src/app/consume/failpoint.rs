//! A test hook: `INBOX_HOST_FAILPOINT_PANIC_ID=<message id>` makes a partition
//! worker panic when a batch holding that message is about to run, so the
//! end-to-end tests can prove a panic in the per-partition path is caught, the
//! record set aside and its partition kept going. Unset (always in production)
//! it costs one load of a static per batch.

use std::sync::LazyLock;

use crate::inbox::Message;

static PANIC_ID: LazyLock<Option<String>> =
    LazyLock::new(|| std::env::var("INBOX_HOST_FAILPOINT_PANIC_ID").ok());

/// Panics when one of `messages` carries the configured id.
pub(super) fn check(messages: &[&Message]) {
    if let Some(id) = PANIC_ID.as_deref() {
        if messages.iter().any(|m| m.message_id == id) {
            panic!("failpoint: INBOX_HOST_FAILPOINT_PANIC_ID={id}");
        }
    }
}
