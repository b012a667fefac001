//! Test hooks, each read once from the environment; unset (always in
//! production) each costs one load of a static where it is checked.
//!
//! - `INBOX_HOST_FAILPOINT_PANIC_ID=<message id>`: a partition worker panics
//!   when a batch holding that message is about to run (a panic in the
//!   per-partition path is caught, the record set aside, the partition kept going).
//! - `INBOX_HOST_FAILPOINT_PANIC_AFTER_COMMIT_ID=<message id>`: the worker
//!   panics once, right after the batch holding that message committed (the
//!   committed records stay done, none is set aside).
//! - `INBOX_HOST_FAILPOINT_PANIC_IN_RECOVERY=1`: the worker panics once more
//!   inside its first recovery from a panic (it is restarted in place).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::LazyLock;

use crate::inbox::Message;

static PANIC_ID: LazyLock<Option<String>> =
    LazyLock::new(|| std::env::var("INBOX_HOST_FAILPOINT_PANIC_ID").ok());
static PANIC_AFTER_COMMIT_ID: LazyLock<Option<String>> =
    LazyLock::new(|| std::env::var("INBOX_HOST_FAILPOINT_PANIC_AFTER_COMMIT_ID").ok());
static PANIC_IN_RECOVERY: LazyLock<bool> =
    LazyLock::new(|| std::env::var_os("INBOX_HOST_FAILPOINT_PANIC_IN_RECOVERY").is_some());
/// The once-only hooks that have fired.
static AFTER_COMMIT_FIRED: AtomicBool = AtomicBool::new(false);
static IN_RECOVERY_FIRED: AtomicBool = AtomicBool::new(false);

/// Panics when one of `messages` carries the configured id.
pub(super) fn check(messages: &[&Message]) {
    if let Some(id) = PANIC_ID.as_deref() {
        if messages.iter().any(|m| m.message_id == id) {
            panic!("failpoint: INBOX_HOST_FAILPOINT_PANIC_ID={id}");
        }
    }
}

/// Panics once, after the batch of `messages` committed, if it holds the id.
pub(super) fn after_commit(messages: &[&Message]) {
    if let Some(id) = PANIC_AFTER_COMMIT_ID.as_deref() {
        if messages.iter().any(|m| m.message_id == id)
            && !AFTER_COMMIT_FIRED.swap(true, Ordering::SeqCst)
        {
            panic!("failpoint: INBOX_HOST_FAILPOINT_PANIC_AFTER_COMMIT_ID={id}");
        }
    }
}

/// Panics in the first recovery of the process, when configured.
pub(super) fn in_recovery() {
    if *PANIC_IN_RECOVERY && !IN_RECOVERY_FIRED.swap(true, Ordering::SeqCst) {
        panic!("failpoint: INBOX_HOST_FAILPOINT_PANIC_IN_RECOVERY");
    }
}
