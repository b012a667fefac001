//! How long a guest has run for one message: wall time since it started, minus
//! the time its `db` calls waited on PostgreSQL (bounded by `statement_timeout`
//! instead). Shared between the store (the epoch check) and the watchdog that
//! cancels a guest blocked in a host call the epoch cannot interrupt, such as a
//! WASI clock poll (`sleep`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::limits::EPOCH_TICK;

#[derive(Clone)]
pub(crate) struct GuestClock(Arc<Mutex<Waits>>);

struct Waits {
    started: Instant,
    waited: Duration,
    /// When the `db` call in progress started waiting, if one is.
    waiting_since: Option<Instant>,
}

impl GuestClock {
    pub fn start() -> Self {
        Self(Arc::new(Mutex::new(Waits {
            started: Instant::now(),
            waited: Duration::ZERO,
            waiting_since: None,
        })))
    }

    /// Starts counting again, for the next message on a reused instance.
    pub fn restart(&self) {
        let mut waits = self.lock();
        waits.started = Instant::now();
        waits.waited = Duration::ZERO;
        waits.waiting_since = None;
    }

    /// Time the guest has run, not counting `db` waits (finished or in progress).
    pub fn ran_for(&self) -> Duration {
        let waits = self.lock();
        let now = Instant::now();
        let waiting = waits.waiting_since.map_or(Duration::ZERO, |s| now - s);
        (now - waits.started).saturating_sub(waits.waited + waiting)
    }

    pub fn db_wait_begins(&self) {
        self.lock().waiting_since = Some(Instant::now());
    }

    pub fn db_wait_ends(&self) {
        let mut waits = self.lock();
        if let Some(since) = waits.waiting_since.take() {
            waits.waited += since.elapsed();
        }
    }

    /// Resolves once the guest has run for `deadline`.
    pub async fn reaches(&self, deadline: Duration) {
        loop {
            let left = deadline.saturating_sub(self.ran_for());
            if left.is_zero() {
                return;
            }
            tokio::time::sleep(left.max(EPOCH_TICK)).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waits> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_waiting_on_the_database_does_not_count() {
        let began = Instant::now();
        let clock = GuestClock::start();
        clock.db_wait_begins();
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            clock.ran_for() < Duration::from_millis(50),
            "{:?}",
            clock.ran_for()
        );
        clock.db_wait_ends();
        std::thread::sleep(Duration::from_millis(20));
        let ran = clock.ran_for();
        assert!(ran >= Duration::from_millis(20), "{ran:?}");
        assert!(
            ran <= began.elapsed() - Duration::from_millis(50),
            "{ran:?}"
        );
    }
}
