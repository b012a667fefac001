//! The outbox table (`inbox_host.outbox`): messages a handler published, stored
//! in its inbox transaction, and what the relay reads and deletes. The table is a
//! contract applications may write too (docs/outbox.md).

use sha2::{Digest, Sha256};
use sqlx::PgConnection;

use super::{AfterCommit, Header, Message};

/// A message a handler published: sent by the relay once its transaction commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub topic: String,
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    /// The handler's own headers (the host adds its own when staging).
    pub headers: Vec<Header>,
}

impl Outgoing {
    /// Its size as the bounds count it: key, value, header names and values.
    pub fn bytes(&self) -> usize {
        let headers: usize = self.headers.iter().map(Header::bytes).sum();
        self.value.len() + self.key.as_ref().map_or(0, Vec::len) + headers
    }
}

/// Header names the host sets on every outgoing message; a handler may not.
pub const MESSAGE_ID_HEADER: &str = "message_id";
pub const CAUSED_BY_HEADER: &str = "inbox-caused-by";
pub const TRACEPARENT_HEADER: &str = "traceparent";
pub const RESERVED_HEADERS: &[&str] = &[MESSAGE_ID_HEADER, CAUSED_BY_HEADER, TRACEPARENT_HEADER];
/// Prefixes of the headers the host puts on dead letters (`--dead-letter-topic`):
/// a handler may not publish a record that looks like one.
pub const RESERVED_HEADER_PREFIXES: &[&str] = &["kafka_dlt-", "inbox_host-"];

/// The `message_id` of the message published at `position` (0, 1, …) by the run
/// of `group`'s handler for the incoming `message_id`: the same on every run, so
/// a run repeated after a rollback, or a relay that sends again after a crash,
/// publishes ids a downstream inbox recognises.
pub fn outgoing_message_id(group: &str, incoming_id: &str, position: usize) -> String {
    derived_id("inbox-host outbox", group, incoming_id, position)
}

/// An id derived from a namespace (what it names: outgoing messages, requests,
/// replies), the group, the incoming message id and a position: a UUID
/// (version 8, RFC 9562) made of the first bytes of a SHA-256 of the parts,
/// each behind its length.
pub fn derived_id(namespace: &str, group: &str, incoming_id: &str, position: usize) -> String {
    let mut hash = Sha256::new();
    for part in [
        namespace.as_bytes(),
        group.as_bytes(),
        incoming_id.as_bytes(),
    ] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hash.update((position as u64).to_be_bytes());
    let mut b: [u8; 16] = hash.finalize()[..16].try_into().expect("16 of 32 bytes");
    b[6] = (b[6] & 0x0f) | 0x80; // version 8
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 9562 variant
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// The headers stored for `outgoing`, published for `message` by `group`: the
/// handler's own, then the cause's `traceparent` (the trace goes on downstream)
/// and the causing message's id (`inbox-caused-by`). `message_id` is a column of
/// its own and sent as a header by the relay.
fn stored_headers(outgoing: &Outgoing, message: &Message) -> serde_json::Value {
    let text = |v: &Option<Vec<u8>>| {
        v.as_ref()
            .map(|v| serde_json::Value::String(String::from_utf8_lossy(v).into_owned()))
            .unwrap_or(serde_json::Value::Null)
    };
    let mut pairs: Vec<serde_json::Value> = outgoing
        .headers
        .iter()
        .map(|h| serde_json::json!([h.key, text(&h.value)]))
        .collect();
    if let Some(trace) = message.headers.iter().find(|h| h.key == TRACEPARENT_HEADER) {
        pairs.push(serde_json::json!([TRACEPARENT_HEADER, text(&trace.value)]));
    }
    pairs.push(serde_json::json!([CAUSED_BY_HEADER, message.message_id]));
    serde_json::Value::Array(pairs)
}

/// Most bytes of messages one insert of [`stage`] carries (and so the most the
/// host encodes at once: a chunk is copied into the statement's parameters and
/// again into the connection's buffer), besides one message past it.
const STAGE_CHUNK_BYTES: usize = 4 << 20;

/// Stores what the handlers of a transaction published: one insert per
/// [`STAGE_CHUNK_BYTES`]. The transaction must be on the host's role already
/// (`store::as_host`): the guest role has no rights in the host's schema.
pub(super) async fn stage(
    conn: &mut PgConnection,
    group: &str,
    runs: &[(&Message, AfterCommit)],
) -> Result<(), sqlx::Error> {
    let mut chunk = Chunk::default();
    for (message, run) in runs {
        for (position, o) in run.messages.iter().enumerate() {
            chunk.push(group, message, position, o);
            if chunk.bytes >= STAGE_CHUNK_BYTES {
                std::mem::take(&mut chunk).insert(conn, group).await?;
            }
        }
    }
    if !chunk.ids.is_empty() {
        chunk.insert(conn, group).await?;
    }
    Ok(())
}

/// The columns of one insert of outgoing rows.
#[derive(Default)]
struct Chunk<'a> {
    topics: Vec<&'a str>,
    keys: Vec<Option<&'a [u8]>>,
    values: Vec<&'a [u8]>,
    headers: Vec<serde_json::Value>,
    ids: Vec<String>,
    bytes: usize,
}

impl<'a> Chunk<'a> {
    fn push(&mut self, group: &str, message: &Message, position: usize, o: &'a Outgoing) {
        self.topics.push(o.topic.as_str());
        self.keys.push(o.key.as_deref());
        self.values.push(o.value.as_slice());
        self.headers.push(stored_headers(o, message));
        self.ids
            .push(outgoing_message_id(group, &message.message_id, position));
        self.bytes += o.bytes();
    }

    async fn insert(self, conn: &mut PgConnection, group: &str) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO inbox_host.outbox (topic, message_key, payload, headers, message_id, consumer_group)
             SELECT o.topic, o.k, o.v, o.h, o.id, $6
             FROM unnest($1::text[], $2::bytea[], $3::bytea[], $4::jsonb[], $5::text[])
                  AS o(topic, k, v, h, id)",
        )
        .bind(&self.topics)
        .bind(&self.keys)
        .bind(&self.values)
        .bind(&self.headers)
        .bind(&self.ids)
        .bind(group)
        .execute(conn)
        .await?;
        Ok(())
    }
}

/// One stored outgoing message, as the relay sends it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OutboxRow {
    pub id: i64,
    pub topic: String,
    pub message_key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    pub headers: serde_json::Value,
    pub message_id: String,
    /// When the row was written (ms since the epoch), sent as the record's
    /// timestamp: every resend of the row carries the same one, so a
    /// downstream inbox meets the first copy's row (docs/outbox.md).
    pub created_ms: i64,
}

impl OutboxRow {
    /// The headers to send: `message_id` first, then the stored pairs (the
    /// table's check keeps them `[name, string or null]`, none named `message_id`).
    pub fn kafka_headers(&self) -> Vec<(&str, Option<&[u8]>)> {
        let stored = self
            .headers
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|pair| match pair.as_array()?.as_slice() {
                [name, value] => Some((name.as_str()?, value.as_str().map(str::as_bytes))),
                _ => None,
            });
        std::iter::once((MESSAGE_ID_HEADER, Some(self.message_id.as_bytes())))
            .chain(stored)
            .collect()
    }
}

/// A relay round reads at most this many rows, and stops adding rows once
/// those before hold this many bytes (keys and values as sent, headers as stored):
/// its memory is bounded whatever the rows hold.
pub const RELAY_ROUND_ROWS: i64 = 2_000;
pub const RELAY_ROUND_BYTES: i64 = 16 << 20;

/// The oldest committed outbox rows, in id order (the order they were written:
/// rows of one key written one after another leave in that order): at most
/// `rows`, and no row after those that already hold `bytes` (the first row is
/// always read, whatever its size). Rows still uncommitted are not seen and are
/// read by a later call, however their ids compare with the ones sent: the
/// relay keeps no high-water mark.
pub async fn pending(
    conn: &mut PgConnection,
    rows: i64,
    bytes: i64,
) -> Result<Vec<OutboxRow>, sqlx::Error> {
    // A bytea's octet_length is its size uncompressed, read from the stored
    // value's header without fetching or decompressing it; headers (small, and
    // jsonb has no such function) count as stored.
    sqlx::query_as(
        "SELECT id, topic, message_key, payload, headers, message_id, created_ms
         FROM (SELECT o.*, (extract(epoch FROM o.created_at) * 1000)::bigint AS created_ms,
                      coalesce(sum(coalesce(octet_length(o.payload), 0)
                                   + coalesce(octet_length(o.message_key), 0)
                                   + pg_column_size(o.headers))
                               OVER (ORDER BY o.id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                               0) AS before
               FROM (SELECT * FROM inbox_host.outbox ORDER BY id LIMIT $1) AS o) AS round
         WHERE before < $2
         ORDER BY id",
    )
    .bind(rows)
    .bind(bytes)
    .fetch_all(conn)
    .await
}

/// Deletes rows the broker acknowledged.
pub async fn delete_sent(conn: &mut PgConnection, ids: &[i64]) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM inbox_host.outbox WHERE id = ANY($1)")
        .bind(ids)
        .execute(conn)
        .await?;
    Ok(())
}

/// Rows waiting in the outbox, counted up to `cap` (past it the count stops),
/// and the age of the oldest in seconds.
pub async fn backlog(conn: &mut PgConnection, cap: i64) -> Result<(i64, f64), sqlx::Error> {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM (SELECT 1 FROM inbox_host.outbox LIMIT $1) AS capped),
                coalesce(extract(epoch FROM now() - (SELECT created_at FROM inbox_host.outbox
                                                     ORDER BY id LIMIT 1))::float8, 0)",
    )
    .bind(cap)
    .fetch_one(conn)
    .await
}

/// The channel the outbox's insert trigger notifies (docs/outbox.md).
pub const OUTBOX_CHANNEL: &str = "inbox_host_outbox";

/// The advisory lock the one relay sending at a time holds ("outbox_r" in ASCII).
const RELAY_LOCK: i64 = 0x6f75_7462_6f78_5f72;

/// Takes the relay lock on this session if no other session holds it, and
/// lets the session's deletes commit without waiting for the disk: a delete
/// lost in a crash only sends its rows again with the same ids, which a
/// downstream inbox drops, so the relay need not compete with the consume
/// side's commits for WAL flushes.
pub async fn try_lock_relay(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    let locked = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(RELAY_LOCK)
        .fetch_one(&mut *conn)
        .await?;
    if locked {
        sqlx::query("SELECT pg_catalog.set_config('synchronous_commit', 'off', false)")
            .execute(conn)
            .await?;
    }
    Ok(locked)
}

#[cfg(test)]
mod tests {
    use super::outgoing_message_id;

    #[test]
    fn outgoing_ids_are_stable_and_differ_by_group_cause_and_position() {
        let id = outgoing_message_id("billing", "order-1", 0);
        assert_eq!(id, outgoing_message_id("billing", "order-1", 0));
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "8", "version 8: {id}");
        for other in [
            outgoing_message_id("shipping", "order-1", 0),
            outgoing_message_id("billing", "order-2", 0),
            outgoing_message_id("billing", "order-1", 1),
            // Lengths are hashed with the parts: moving a byte across changes it.
            outgoing_message_id("billin", "gorder-1", 0),
        ] {
            assert_ne!(id, other);
        }
    }
}
