//! Locks that survive a panic elsewhere: the data they guard stays usable
//! (counters, maps of handoffs), so a poisoned lock is taken as it is.

use std::sync::{Mutex, MutexGuard};

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
