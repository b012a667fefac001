//! The outbox relay: committed rows of `inbox_host.outbox` to Kafka with the
//! idempotent producer, each row deleted only after the broker acknowledged it.
//!
//! One relay sends at a time per database: whoever holds the relay lock (a
//! session advisory lock), every other host's relay stands by and takes over
//! when that session ends. One sender keeps each key's order without dividing
//! anything; docs/semantics.md says why this beats dividing keys, and what one
//! relay sends per second.
//!
//! How a relay learns of new rows: the host wakes its own relay in process
//! after a commit ([`RelayStatus::committed`]), and sends one `NOTIFY` after
//! the commit when another process relays; rows an application inserts notify
//! through the table's trigger. The host's own inserts skip that trigger: a
//! `NOTIFY` inside a transaction takes a database-wide lock at commit, which
//! would serialise the commits of all partition workers.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool};
use sqlx::{Connection, PgConnection};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::inbox::{self, OutboxRow};
use crate::kafka::{Publication, Publisher};

/// How often a relay with nothing to do looks anyway (a notification can be
/// missed while its listening connection reconnects), and how often a standby
/// asks for the lock.
const IDLE_POLL: Duration = Duration::from_secs(1);
/// How long to wait before trying again after a failure.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// What the relay is doing, for `/metrics`, `/health/ready` and the progress log.
#[derive(Debug, Default)]
pub struct RelayStatus {
    /// Whether this process holds the relay lock.
    pub leading: AtomicBool,
    /// Messages the broker acknowledged (and whose rows were deleted).
    pub sent: AtomicU64,
    /// Sends the broker refused and database errors, all together.
    pub errors: AtomicU64,
    /// Rows waiting, as last counted (up to `--max-outbox-backlog`, or
    /// [`BACKLOG_CAP`] for the relay command).
    pub backlog_rows: AtomicI64,
    /// Age of the oldest waiting row, in ms, as last measured.
    pub oldest_ms: AtomicI64,
    /// Since when the relay has had a round it could not finish (a failed send
    /// or a database error), and the last such error.
    failing: Mutex<Option<(Instant, String)>>,
    /// Since when the current round's messages have been waiting for the broker.
    sending: Mutex<Option<Instant>>,
    /// Whether this process's handlers may publish (`--publish-topic`): if
    /// not, its commits never write outbox rows and wake no relay.
    stages_rows: bool,
    /// Rows committed by this process, for its relay while it leads.
    wake: Notify,
    /// Rows committed by this process, for the relay of another process.
    wake_elsewhere: Notify,
}

/// The most rows counted when measuring the backlog.
pub const BACKLOG_CAP: i64 = 10_000_000;

impl RelayStatus {
    /// The status of a host whose handlers may (`stages_rows`) or may not
    /// publish.
    pub fn for_host(stages_rows: bool) -> Self {
        Self {
            stages_rows,
            ..Self::default()
        }
    }

    /// Says that a transaction of this process that may have written outbox
    /// rows committed: wakes this process's relay while it leads, otherwise
    /// asks [`notify_elsewhere_forever`] for a `NOTIFY`. Costs an atomic load
    /// and a stored permit; many calls before the wake-up make one.
    pub fn committed(&self) {
        if !self.stages_rows {
            return;
        }
        if self.leading.load(Ordering::Relaxed) {
            self.wake.notify_one();
        } else {
            self.wake_elsewhere.notify_one();
        }
    }

    /// How long the relay has not been able to send, and why: its last error,
    /// or a round of messages the broker has not acknowledged for `waited` (the
    /// producer retries through a broker outage without failing them); `None`
    /// while it sends or has nothing to send.
    pub fn stuck(&self, waited: Duration) -> Option<(Duration, String)> {
        let failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((since, e)) = failing.as_ref() {
            return Some((since.elapsed(), e.clone()));
        }
        let sending = self.sending.lock().unwrap_or_else(|e| e.into_inner());
        sending
            .filter(|since| since.elapsed() >= waited)
            .map(|since| {
                let s = since.elapsed();
                (
                    s,
                    format!(
                        "the broker has not acknowledged messages sent {} s ago",
                        s.as_secs()
                    ),
                )
            })
    }

    fn sending(&self, now: Option<Instant>) {
        *self.sending.lock().unwrap_or_else(|e| e.into_inner()) = now;
    }

    fn failed(&self, error: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        match failing.as_mut() {
            Some((_, last)) => *last = error,
            None => *failing = Some((Instant::now(), error)),
        }
    }

    fn succeeded(&self) {
        *self.failing.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Relays until the task is dropped: waits for the relay lock, then sends
/// rows as they commit. Failures are logged and counted, and the relay tries
/// again; rows stay in the table until the broker acknowledged them.
pub async fn relay_forever(pool: PgPool, publisher: Publisher, status: Arc<RelayStatus>) {
    let mut said_standby = false;
    loop {
        match lead(&pool, &publisher, &status, &mut said_standby).await {
            Ok(()) => {}
            Err(e) => {
                status.leading.store(false, Ordering::Relaxed);
                let error = format!("{e:#}");
                tracing::warn!(error = %error, "outbox relay: database error; trying again");
                status.failed(error);
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }
    }
}

/// One leadership: a session that takes the lock (or returns when it cannot),
/// then sends until a database error ends the session (and with it the lock).
async fn lead(
    pool: &PgPool,
    publisher: &Publisher,
    status: &RelayStatus,
    said_standby: &mut bool,
) -> anyhow::Result<()> {
    let mut conn = PgConnection::connect_with(&pool.connect_options()).await?;
    if !inbox::try_lock_relay(&mut conn).await? {
        if !*said_standby {
            tracing::info!("outbox relay: another process is relaying; standing by");
            *said_standby = true;
        }
        conn.close().await?;
        tokio::time::sleep(IDLE_POLL).await;
        return Ok(());
    }
    *said_standby = false;
    tracing::info!("outbox relay: relaying committed outbox rows");
    status.leading.store(true, Ordering::Relaxed);
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(inbox::OUTBOX_CHANNEL).await?;
    loop {
        let rows =
            inbox::pending_outgoing(&mut conn, inbox::RELAY_ROUND_ROWS, inbox::RELAY_ROUND_BYTES)
                .await?;
        if rows.is_empty() {
            status.succeeded();
            // Woken by this process's commit, another's NOTIFY, or the backstop poll.
            tokio::select! {
                () = status.wake.notified() => {}
                _ = listener.try_recv() => {}
                () = tokio::time::sleep(IDLE_POLL) => {}
            }
            continue;
        }
        status.sending(Some(Instant::now()));
        let sent = send(publisher, &rows).await;
        status.sending(None);
        exit_if_failpoint();
        inbox::delete_sent(&mut conn, &sent.acknowledged).await?;
        status
            .sent
            .fetch_add(sent.acknowledged.len() as u64, Ordering::Relaxed);
        match sent.first_error {
            None => status.succeeded(),
            Some(error) => {
                tracing::warn!(error = %error, "outbox relay: the broker refused a message; its row stays and is sent again");
                status.failed(error);
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }
    }
}

/// A test hook: `INBOX_HOST_FAILPOINT_RELAY_ABORT=1` ends the process the way
/// `kill -9` would, after the broker acknowledged a round and before its rows
/// are deleted, so a test can prove the restart sends them again with the same
/// ids. Unset (always in production) it costs one load of a static per round.
fn exit_if_failpoint() {
    static ABORT: std::sync::LazyLock<bool> =
        std::sync::LazyLock::new(|| std::env::var_os("INBOX_HOST_FAILPOINT_RELAY_ABORT").is_some());
    if *ABORT {
        eprintln!("failpoint: INBOX_HOST_FAILPOINT_RELAY_ABORT after the broker's ack");
        std::process::abort();
    }
}

/// What a round of sends did.
struct Sent {
    acknowledged: Vec<i64>,
    first_error: Option<String>,
}

async fn send(publisher: &Publisher, rows: &[OutboxRow]) -> Sent {
    let headers: Vec<_> = rows.iter().map(OutboxRow::kafka_headers).collect();
    let publications: Vec<Publication> = rows
        .iter()
        .zip(&headers)
        .map(|(row, headers)| Publication {
            topic: &row.topic,
            key: row.message_key.as_deref(),
            headers,
            payload: row.payload.as_deref(),
            timestamp_ms: Some(row.created_ms),
        })
        .collect();
    let results = publisher.publish_all(&publications).await;
    let mut sent = Sent {
        acknowledged: Vec::with_capacity(rows.len()),
        first_error: None,
    };
    for (row, result) in rows.iter().zip(results) {
        match result {
            Ok(()) => sent.acknowledged.push(row.id),
            Err(e) => {
                sent.first_error
                    .get_or_insert_with(|| format!("row {} to topic {}: {e}", row.id, row.topic));
            }
        }
    }
    sent
}

/// Sends `NOTIFY inbox_host_outbox` after this process committed outbox rows
/// while another process relays (one at a time: the calls that come while one
/// is on its way make one more).
pub async fn notify_elsewhere_forever(pool: PgPool, status: Arc<RelayStatus>) {
    loop {
        status.wake_elsewhere.notified().await;
        let notified = sqlx::query("SELECT pg_catalog.pg_notify($1, '')")
            .bind(inbox::OUTBOX_CHANNEL)
            .execute(&pool)
            .await;
        if let Err(e) = notified {
            // The relay's backstop poll finds the rows within a second anyway.
            tracing::debug!(error = %e, "waking the outbox relay of another process failed");
        }
    }
}

/// Measures the backlog every second into `status` (every host, leading or not:
/// the consume side of each one stops at `max` rows), and says when it crosses
/// `max` either way. It counts no further than `max` (or [`BACKLOG_CAP`]):
/// in a deep backlog each host's count stays a bounded scan.
pub async fn measure_backlog_forever(pool: PgPool, status: Arc<RelayStatus>, max: i64) {
    let mut full = false;
    loop {
        let measured = async {
            let mut conn = pool.acquire().await?;
            inbox::outbox_backlog(&mut conn, max.clamp(1, BACKLOG_CAP)).await
        }
        .await;
        match measured {
            Ok((rows, oldest_s)) => {
                if (rows >= max) != full {
                    full = rows >= max;
                    if full {
                        tracing::warn!(rows, oldest_s, "the outbox holds --max-outbox-backlog rows or more: no new records are taken until the relay sends some (is the broker reachable?)");
                    } else {
                        tracing::info!(rows, "the outbox backlog is below --max-outbox-backlog again: taking records");
                    }
                }
                status.backlog_rows.store(rows, Ordering::Relaxed);
                status
                    .oldest_ms
                    .store((oldest_s * 1000.0) as i64, Ordering::Relaxed);
            }
            Err(e) => tracing::debug!(error = %e, "measuring the outbox backlog failed"),
        }
        tokio::time::sleep(BACKLOG_EVERY).await;
    }
}

/// How often the backlog is measured.
pub const BACKLOG_EVERY: Duration = Duration::from_secs(1);
