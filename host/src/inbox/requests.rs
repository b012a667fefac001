//! The requests table (`inbox_host.requests`): HTTP requests a handler asked
//! for, stored in its inbox transaction, and what the sender takes, finishes
//! and sets aside. The sending itself is the app's (app/requests/).

use sqlx::{PgConnection, PgPool};

use super::outbox::derived_id;
use super::{AfterCommit, Header, Message, MAX_FAILURE_TEXT};

/// An HTTP request a handler asked for: sent once its transaction commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingRequest {
    pub method: String,
    pub url: String,
    /// The handler's own headers (values checked as UTF-8 text).
    pub headers: Vec<Header>,
    pub body: Vec<u8>,
    pub ordering_key: Option<String>,
    pub reply_topic: Option<String>,
}

impl OutgoingRequest {
    /// Its size as the bounds count it: URL, header names and values, body.
    pub fn bytes(&self) -> usize {
        let headers: usize = self.headers.iter().map(Header::bytes).sum();
        self.url.len() + headers + self.body.len()
    }
}

/// The `Idempotency-Key` of the request asked for at `position` (0, 1, …) by
/// the run of `group`'s handler for the incoming `message_id`: the same on
/// every run of the record and every resend of the request.
pub fn idempotency_key(group: &str, incoming_id: &str, position: usize) -> String {
    derived_id("inbox-host request", group, incoming_id, position)
}

/// The `Idempotency-Key` of the call made at `position` (0, 1, …) in the
/// handler: the same on every run of the record, so the redelivery of a
/// rolled-back run repeats its keys. Its own namespace: a call and a request
/// after commit at the same position have different keys.
pub fn call_key(group: &str, incoming_id: &str, position: usize) -> String {
    derived_id("inbox-host call", group, incoming_id, position)
}

/// The `message_id` of the reply to the request with `key`.
pub fn reply_message_id(group: &str, key: &str) -> String {
    derived_id("inbox-host reply", group, key, 0)
}

/// Stores the requests of a transaction's handlers, on the host's role (the
/// caller has switched to it, as for the outbox: `store::as_host`).
pub(super) async fn stage(
    conn: &mut PgConnection,
    group: &str,
    runs: &[(&Message, AfterCommit)],
) -> Result<(), sqlx::Error> {
    let rows = runs.iter().map(|(_, r)| r.requests.len()).sum::<usize>();
    if rows == 0 {
        return Ok(());
    }
    let mut columns = Columns::with_capacity(rows);
    for (message, run) in runs {
        for (position, r) in run.requests.iter().enumerate() {
            columns.push(group, message, position, r);
        }
    }
    sqlx::query(
        "INSERT INTO inbox_host.requests
             (consumer_group, idempotency_key, method, url, headers, body, ordering_key,
              reply_topic, caused_by, topic, kafka_partition, kafka_offset)
         SELECT $1, r.key, r.method, r.url, r.headers, r.body, r.ordering, r.reply,
                r.caused_by, r.topic, r.part, r.off
         FROM unnest($2::text[], $3::text[], $4::text[], $5::jsonb[], $6::bytea[], $7::text[],
                     $8::text[], $9::text[], $10::text[], $11::int4[], $12::int8[])
              AS r(key, method, url, headers, body, ordering, reply, caused_by, topic, part, off)",
    )
    .bind(group)
    .bind(&columns.keys)
    .bind(&columns.methods)
    .bind(&columns.urls)
    .bind(&columns.headers)
    .bind(&columns.bodies)
    .bind(&columns.ordering)
    .bind(&columns.replies)
    .bind(&columns.caused_by)
    .bind(&columns.topics)
    .bind(&columns.partitions)
    .bind(&columns.offsets)
    .execute(conn)
    .await?;
    Ok(())
}

/// The columns of one insert of requests.
struct Columns<'a> {
    keys: Vec<String>,
    methods: Vec<&'a str>,
    urls: Vec<&'a str>,
    headers: Vec<serde_json::Value>,
    bodies: Vec<&'a [u8]>,
    ordering: Vec<Option<&'a str>>,
    replies: Vec<Option<&'a str>>,
    caused_by: Vec<&'a str>,
    topics: Vec<&'a str>,
    partitions: Vec<i32>,
    offsets: Vec<i64>,
}

impl<'a> Columns<'a> {
    fn with_capacity(n: usize) -> Self {
        Self {
            keys: Vec::with_capacity(n),
            methods: Vec::with_capacity(n),
            urls: Vec::with_capacity(n),
            headers: Vec::with_capacity(n),
            bodies: Vec::with_capacity(n),
            ordering: Vec::with_capacity(n),
            replies: Vec::with_capacity(n),
            caused_by: Vec::with_capacity(n),
            topics: Vec::with_capacity(n),
            partitions: Vec::with_capacity(n),
            offsets: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, group: &str, message: &'a Message, position: usize, r: &'a OutgoingRequest) {
        self.keys
            .push(idempotency_key(group, &message.message_id, position));
        self.methods.push(&r.method);
        self.urls.push(&r.url);
        self.headers.push(header_pairs(&r.headers));
        self.bodies.push(&r.body);
        self.ordering.push(r.ordering_key.as_deref());
        self.replies.push(r.reply_topic.as_deref());
        self.caused_by.push(&message.message_id);
        self.topics.push(&message.topic);
        self.partitions.push(message.partition);
        self.offsets.push(message.offset);
    }
}

fn header_pairs(headers: &[Header]) -> serde_json::Value {
    headers
        .iter()
        .map(|h| {
            let value = h
                .value
                .as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned());
            serde_json::json!([h.key, value])
        })
        .collect()
}

/// A stored request, as the sender takes it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredRequest {
    pub id: i64,
    pub consumer_group: String,
    pub idempotency_key: String,
    pub method: String,
    pub url: String,
    pub headers: serde_json::Value,
    pub body: Vec<u8>,
    pub ordering_key: Option<String>,
    pub reply_topic: Option<String>,
    pub caused_by: String,
    pub topic: String,
    pub kafka_partition: i32,
    pub kafka_offset: i64,
    /// Attempts so far, this one included.
    pub attempts: i32,
    /// Seconds since the request was stored (its retry window runs from then).
    pub age_secs: f64,
}

impl StoredRequest {
    /// The handler's headers, in order (`[name, value]` pairs as stored).
    pub fn header_pairs(&self) -> Vec<(&str, Option<&str>)> {
        self.headers
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|pair| match pair.as_array()?.as_slice() {
                [name, value] => Some((name.as_str()?, value.as_str())),
                _ => None,
            })
            .collect()
    }
}

/// Takes up to `limit` of `group`'s requests that are due, leasing each for
/// `lease` (a sender that dies mid-request leaves it to be taken again when the
/// lease ends, with the same key). A request with an ordering key is taken only
/// when no earlier request of its key is left: one at a time per key, in order.
pub async fn take_due(
    pool: &PgPool,
    group: &str,
    limit: i64,
    lease: std::time::Duration,
) -> Result<Vec<StoredRequest>, sqlx::Error> {
    sqlx::query_as(
        "WITH due AS (
             SELECT r.id FROM inbox_host.requests r
             WHERE r.consumer_group = $1 AND r.next_attempt_at <= now()
               AND (r.ordering_key IS NULL OR NOT EXISTS (
                   SELECT 1 FROM inbox_host.requests e
                   WHERE e.consumer_group = r.consumer_group
                     AND e.ordering_key = r.ordering_key AND e.id < r.id))
             ORDER BY r.id LIMIT $2
             FOR UPDATE SKIP LOCKED)
         UPDATE inbox_host.requests r
         SET attempts = r.attempts + 1,
             next_attempt_at = now() + make_interval(secs => $3)
         FROM due WHERE r.id = due.id
         RETURNING r.id, r.consumer_group, r.idempotency_key, r.method, r.url, r.headers,
                   r.body, r.ordering_key, r.reply_topic, r.caused_by, r.topic,
                   r.kafka_partition, r.kafka_offset, r.attempts,
                   extract(epoch FROM now() - r.created_at)::float8 AS age_secs",
    )
    .bind(group)
    .bind(limit)
    .bind(lease.as_secs_f64())
    .fetch_all(pool)
    .await
}

/// When `group` next has a request due (none: `None`), for the sender's sleep.
pub async fn next_due_in(pool: &PgPool, group: &str) -> Result<Option<f64>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT greatest(0, extract(epoch FROM min(next_attempt_at) - now()))::float8
         FROM inbox_host.requests WHERE consumer_group = $1",
    )
    .bind(group)
    .fetch_one(pool)
    .await
}

/// A reply to stage with a finished request: published to its reply topic.
pub struct Reply {
    pub topic: String,
    pub payload: Vec<u8>,
    /// `[name, value]` pairs: the status, the content type, the request's key.
    pub headers: serde_json::Value,
}

/// Requests answered for good that have no reply to stage: deleted in one
/// statement. Their commit does not wait for the disk: a delete lost in a
/// database crash only sends its request again, with the same key.
pub async fn finish_all(pool: &PgPool, ids: &[i64]) -> Result<(), sqlx::Error> {
    if ids.is_empty() {
        return Ok(());
    }
    let mut tx = begin_not_waiting_for_the_disk(pool).await?;
    sqlx::query("DELETE FROM inbox_host.requests WHERE id = ANY($1)")
        .bind(ids)
        .execute(&mut *tx)
        .await?;
    tx.commit().await
}

/// A request answered for good: deleted, and its reply (if any) staged in the
/// outbox in the same transaction, so the reply exists exactly when the
/// request is done. Like [`finish_all`], not waiting for the disk.
pub async fn finish(
    pool: &PgPool,
    request: &StoredRequest,
    reply: Option<Reply>,
) -> Result<(), sqlx::Error> {
    let mut tx = begin_not_waiting_for_the_disk(pool).await?;
    if let Some(reply) = reply {
        sqlx::query(
            "INSERT INTO inbox_host.outbox (topic, message_key, payload, headers, message_id, consumer_group)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&reply.topic)
        .bind(request.ordering_key.as_deref().map(str::as_bytes))
        .bind(&reply.payload)
        .bind(reply.headers)
        .bind(reply_message_id(&request.consumer_group, &request.idempotency_key))
        .bind(&request.consumer_group)
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query("DELETE FROM inbox_host.requests WHERE id = $1")
        .bind(request.id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await
}

/// A transaction whose commit does not wait for the disk: what it records of
/// a sent request, lost in a crash, only sends that request again, same key.
async fn begin_not_waiting_for_the_disk(
    pool: &PgPool,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET LOCAL synchronous_commit = off")
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// A request to try again after `delay`, with what went wrong.
pub async fn retry_later(
    pool: &PgPool,
    request: &StoredRequest,
    delay: std::time::Duration,
    error: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE inbox_host.requests
         SET next_attempt_at = now() + make_interval(secs => $2), last_error = $3
         WHERE id = $1",
    )
    .bind(request.id)
    .bind(delay.as_secs_f64())
    .bind(super::storable_text(error, MAX_FAILURE_TEXT))
    .execute(pool)
    .await?;
    Ok(())
}

/// A request that failed for good: a dead letter of kind `request` (the
/// request whole, and `answer`: status, headers and the start of the body, or
/// why nothing came back), and its row deleted, in one transaction.
pub async fn set_aside(
    pool: &PgPool,
    request: &StoredRequest,
    worker_id: &str,
    reason: &str,
    answer: serde_json::Value,
) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    let details = serde_json::json!({
        "method": request.method,
        "url": request.url,
        "idempotency_key": request.idempotency_key,
        "ordering_key": request.ordering_key,
        "reply_topic": request.reply_topic,
        "answer": answer,
    });
    sqlx::query(
        "INSERT INTO inbox_host.dead_letters
             (consumer_group, topic, kafka_partition, kafka_offset, message_id, reason,
              headers, payload, worker_id, failure_kind, attempts, letter_kind, request)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'request', $10, 'request', $11)",
    )
    .bind(&request.consumer_group)
    .bind(&request.topic)
    .bind(request.kafka_partition)
    .bind(request.kafka_offset)
    .bind(&request.caused_by)
    .bind(super::storable_text(reason, MAX_FAILURE_TEXT))
    .bind(letter_headers(&request.headers))
    .bind(&request.body)
    .bind(worker_id)
    .bind(request.attempts)
    .bind(details)
    .execute(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM inbox_host.requests WHERE id = $1")
        .bind(request.id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await
}

/// Stored `[name, value]` pairs as a dead letter keeps headers (`{key, value}`).
fn letter_headers(pairs: &serde_json::Value) -> serde_json::Value {
    pairs
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|pair| match pair.as_array()?.as_slice() {
            [key, value] => Some(serde_json::json!({ "key": key, "value": value })),
            _ => None,
        })
        .collect()
}

/// Requests of `group` waiting to be sent, by the start of their URL
/// (`scheme://[user@]host[:port]`): how many, and the age of the oldest in seconds.
pub async fn backlog(pool: &PgPool, group: &str) -> Result<Vec<(String, i64, f64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT lower(substring(url FROM '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]+')),
                count(*), extract(epoch FROM now() - min(created_at))::float8
         FROM inbox_host.requests WHERE consumer_group = $1
         GROUP BY 1",
    )
    .bind(group)
    .fetch_all(pool)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_and_apart_from_outgoing_message_ids() {
        let key = idempotency_key("billing", "order-1", 0);
        assert_eq!(key, idempotency_key("billing", "order-1", 0));
        assert_ne!(key, idempotency_key("billing", "order-1", 1));
        assert_ne!(
            key,
            super::super::outgoing_message_id("billing", "order-1", 0)
        );
        assert_ne!(reply_message_id("billing", &key), key);
    }
}
