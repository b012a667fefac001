//! The sender of requests after commit: takes the group's due requests from
//! `inbox_host.requests`, sends each through the gate with its
//! `Idempotency-Key`, and acts on what came back as `egress::next_attempt`
//! decides: done (deleted, its reply staged in the outbox in the same
//! transaction), tried again later, or set aside as a dead letter of kind
//! `request`. Every host of a group runs one; a request is leased while it is
//! sent, so two senders never send it at once, and a sender that dies
//! mid-request leaves it to be sent again, with the same key, when the lease
//! ends.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Semaphore;

use crate::egress::{self, Answer, Attempt, Call, Failure, Gate, Next, Purpose, Schedule};
use crate::inbox::{self, Reply, StoredRequest};

/// How the group's requests are sent.
#[derive(Debug, Clone)]
pub struct SenderSettings {
    pub group: String,
    pub worker_id: String,
    pub schedule: Schedule,
    /// Requests in flight at once per origin (`--http-concurrency`).
    pub per_origin: usize,
    /// How long a taken request is leased: past the time per request, so a
    /// live sender finishes first.
    pub lease: Duration,
}

/// Requests taken per round.
const ROUND: i64 = 256;
/// Rounds being sent at once.
const ROUNDS_IN_FLIGHT: usize = 3;
/// The longest a sender with nothing due sleeps before looking again.
const IDLE_POLL: Duration = Duration::from_millis(200);
/// Bytes of a response body kept in a dead letter.
const BODY_START: usize = 2048;
/// How long to wait after the database failed.
const AFTER_FAILURE: Duration = Duration::from_secs(1);
/// How often the backlog per origin is measured for `/metrics`.
const MEASURE_EVERY: Duration = Duration::from_secs(1);

/// The backlog as the gate's counts name origins (`user@` dropped, so two
/// spellings of one origin are one).
fn by_origin(waiting: Vec<(String, i64, f64)>) -> Vec<egress::Backlog> {
    let mut origins: std::collections::BTreeMap<String, (i64, f64)> = Default::default();
    for (start, rows, oldest) in waiting {
        let entry = origins.entry(egress::origin_of(&start)).or_default();
        *entry = (entry.0 + rows, entry.1.max(oldest));
    }
    origins
        .into_iter()
        .map(|(origin, (rows, oldest_seconds))| egress::Backlog {
            origin,
            rows,
            oldest_seconds,
        })
        .collect()
}

/// Sends the group's requests until the process ends; `committed` wakes it
/// when a batch of this process commits (a backstop poll finds the rest).
pub async fn send_forever(
    pool: PgPool,
    gate: Arc<Gate>,
    committed: Arc<tokio::sync::Notify>,
    settings: SenderSettings,
) {
    let origins = Arc::new(Origins::default());
    // Rounds overlap: the next is taken while the last is sent (a taken row
    // is leased, and a later request of its ordering key waits for it).
    let rounds = Arc::new(Semaphore::new(ROUNDS_IN_FLIGHT));
    let mut measured = tokio::time::Instant::now() - MEASURE_EVERY;
    loop {
        if measured.elapsed() >= MEASURE_EVERY {
            measured = tokio::time::Instant::now();
            match inbox::request_backlog(&pool, &settings.group).await {
                Ok(waiting) => gate.stats().set_backlog(by_origin(waiting)),
                Err(e) => {
                    tracing::debug!(error = %e, "requests after commit: the backlog could not be measured")
                }
            }
        }
        let Ok(round) = rounds.clone().acquire_owned().await else {
            return;
        };
        let due = match inbox::take_due_requests(&pool, &settings.group, ROUND, settings.lease)
            .await
        {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "requests after commit: could not take due requests; trying again");
                tokio::time::sleep(AFTER_FAILURE).await;
                continue;
            }
        };
        if due.is_empty() {
            drop(round);
            let next = inbox::next_due_in(&pool, &settings.group)
                .await
                .ok()
                .flatten();
            let wait = next.map_or(IDLE_POLL, |s| Duration::from_secs_f64(s).min(IDLE_POLL));
            tokio::select! {
                _ = tokio::time::sleep(wait.max(Duration::from_millis(5))) => {}
                _ = committed.notified() => {}
            }
            continue;
        }
        let (pool, gate, settings, origins) = (
            pool.clone(),
            gate.clone(),
            settings.clone(),
            origins.clone(),
        );
        tokio::spawn(async move {
            send_round(&pool, &gate, &settings, &origins, due).await;
            drop(round);
        });
    }
}

/// Sends one round's requests, each as its origin's bound allows, and deletes
/// the plain successes together once they are all answered.
async fn send_round(
    pool: &PgPool,
    gate: &Arc<Gate>,
    settings: &SenderSettings,
    origins: &Origins,
    due: Vec<StoredRequest>,
) {
    let sends = due.into_iter().map(|request| {
        let (pool, gate, settings) = (pool.clone(), gate.clone(), settings.clone());
        let slot = origins.slot(&request.url, settings.per_origin);
        tokio::spawn(async move {
            let _permit = slot.acquire_owned().await;
            send_one(&pool, &gate, &settings, request).await
        })
    });
    let mut done = Vec::new();
    for sent in sends.collect::<Vec<_>>() {
        match sent.await {
            Ok(Some(id)) => done.push(id),
            Ok(None) => {}
            Err(e) => tracing::error!(error = %e, "requests after commit: a send task failed"),
        }
    }
    if let Err(e) = inbox::finish_requests(pool, &done).await {
        // Their leases run out and they are sent again with the same keys.
        tracing::warn!(error = %e, requests = done.len(), "requests after commit: could not record the answered ones; they will be sent again");
    }
}

/// A semaphore per origin, made on first use.
#[derive(Default)]
struct Origins(Mutex<HashMap<String, Arc<Semaphore>>>);

impl Origins {
    fn slot(&self, url: &str, per_origin: usize) -> Arc<Semaphore> {
        let origin = url::Url::parse(url)
            .map_or_else(|_| url.to_string(), |u| u.origin().ascii_serialization());
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(origin)
            .or_insert_with(|| Arc::new(Semaphore::new(per_origin.max(1))))
            .clone()
    }
}

/// Sends `request` and records what came of it, except a success with no reply
/// to stage: its id is returned, for the round's one delete.
async fn send_one(
    pool: &PgPool,
    gate: &Gate,
    settings: &SenderSettings,
    request: StoredRequest,
) -> Option<i64> {
    let headers = request.header_pairs();
    let call = Call {
        method: &request.method,
        url: &request.url,
        headers: headers.iter().map(|(n, v)| (*n, v.unwrap_or(""))).collect(),
        body: &request.body,
        idempotency_key: &request.idempotency_key,
        purpose: Purpose::AfterCommit,
    };
    let sent = gate.send(&call).await;
    let attempts = u32::try_from(request.attempts).unwrap_or(u32::MAX);
    let age = Duration::from_secs_f64(request.age_secs.max(0.0));
    let next = match &sent {
        Ok(answer) => egress::next_attempt(
            &Attempt::Answered {
                status: answer.status,
                retry_after: answer.header("retry-after"),
            },
            attempts,
            age,
            &settings.schedule,
            jitter(),
        ),
        Err(Failure::NoAnswer(_)) => egress::next_attempt(
            &Attempt::NoAnswer,
            attempts,
            age,
            &settings.schedule,
            jitter(),
        ),
        Err(Failure::Refused(_)) => Next::GiveUp,
    };
    let acted = match (&sent, next) {
        (Ok(answer), Next::Done) if egress::is_success(answer.status) => {
            let Some(topic) = request.reply_topic.as_deref() else {
                return Some(request.id);
            };
            let reply = reply_of(topic, &request, answer);
            inbox::finish_request(pool, &request, Some(reply)).await
        }
        (Ok(answer), Next::Done) => {
            let reason = format!(
                "{} {} answered {} (final: only 408, 425, 429, 500, 502, 503 and 504 are retried{})",
                request.method,
                request.url,
                answer.status,
                if (300..400).contains(&answer.status) { "; redirects are not followed" } else { "" }
            );
            set_aside(pool, settings, &request, &reason, answered(answer)).await
        }
        (_, Next::RetryIn(wait)) => {
            let error = match &sent {
                Ok(answer) => format!("answered {}", answer.status),
                Err(e) => e.to_string(),
            };
            tracing::info!(key = %request.idempotency_key, attempt = attempts, retry_in_ms = wait.as_millis() as u64,
                "request after commit not done ({error}); trying again");
            gate.stats().retried(&request.url);
            inbox::retry_request_later(pool, &request, wait, &error).await
        }
        (_, Next::GiveUp | Next::Done) => {
            let (reason, answer) = match &sent {
                Err(Failure::Refused(why)) => (
                    format!("refused by the host: {why}"),
                    serde_json::json!({ "error": why }),
                ),
                Err(Failure::NoAnswer(why)) => (
                    format!(
                        "no answer within --http-retry-for ({} s); last: {why}",
                        settings.schedule.window.as_secs()
                    ),
                    serde_json::json!({ "error": why }),
                ),
                Ok(answer) => (
                    format!(
                        "still answered {} when --http-retry-for ({} s) ran out",
                        answer.status,
                        settings.schedule.window.as_secs()
                    ),
                    answered(answer),
                ),
            };
            set_aside(pool, settings, &request, &reason, answer).await
        }
    };
    if let Err(e) = acted {
        // The lease runs out and the request is sent again with the same key.
        tracing::warn!(key = %request.idempotency_key, error = %e, "requests after commit: could not record the outcome; it will be sent again");
    }
    None
}

async fn set_aside(
    pool: &PgPool,
    settings: &SenderSettings,
    request: &StoredRequest,
    reason: &str,
    answer: serde_json::Value,
) -> Result<(), sqlx::Error> {
    tracing::error!(key = %request.idempotency_key, url = %request.url, reason, "request after commit set aside in inbox_host.dead_letters");
    inbox::set_request_aside(pool, request, &settings.worker_id, reason, answer).await
}

/// Status, headers and the start of the body, for a dead letter.
fn answered(answer: &Answer) -> serde_json::Value {
    let start = &answer.body[..answer.body.len().min(BODY_START)];
    serde_json::json!({
        "status": answer.status,
        "headers": answer.headers,
        "body_start": inbox::storable_text(&String::from_utf8_lossy(start), BODY_START * 2),
    })
}

/// The reply a request with a reply topic publishes: the body, with the
/// status, content type and key as headers.
fn reply_of(topic: &str, request: &StoredRequest, answer: &Answer) -> Reply {
    let mut headers = vec![
        serde_json::json!(["http-status", answer.status.to_string()]),
        serde_json::json!(["idempotency-key", request.idempotency_key]),
        serde_json::json!([inbox::CAUSED_BY_HEADER, request.caused_by]),
    ];
    if let Some(ct) = answer.header("content-type") {
        headers.push(serde_json::json!([
            "content-type",
            inbox::storable_text(ct, 256)
        ]));
    }
    if answer.truncated {
        headers.push(serde_json::json!(["http-body-truncated", "true"]));
    }
    Reply {
        topic: topic.to_string(),
        payload: answer.body.clone(),
        headers: serde_json::Value::Array(headers),
    }
}

/// A number in [0, 1) for the backoff's jitter.
fn jitter() -> f64 {
    let bits = RandomState::new().hash_one(std::time::Instant::now());
    (bits >> 11) as f64 / (1u64 << 53) as f64
}
