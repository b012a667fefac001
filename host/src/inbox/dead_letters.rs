//! Dead letters: records set aside instead of handled, kept whole in
//! `inbox_host.dead_letters` so an operator can list, inspect and redrive them.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgPool, Postgres, QueryBuilder, Transaction};

use super::{Header, Message};

/// A message the host sets aside instead of handling, kept whole for replay.
pub struct DeadLetter<'a> {
    pub group: &'a str,
    pub worker_id: &'a str,
    pub message: &'a Message,
    pub message_id: Option<&'a str>,
    pub reason: &'a str,
    /// The failure's kind (`handler-error`, `deadline`, …) or why the record
    /// could not be used (`unusable`).
    pub kind: &'a str,
    /// Failed attempts before it was set aside (0: never handled).
    pub attempts: u32,
    /// The plugin version of the last attempt, if one ran.
    pub plugin_digest: Option<&'a str>,
}

/// Records a dead letter in its own transaction. Idempotent per record
/// (group, topic, partition, offset), so a redelivery does not add a second row.
pub async fn dead_letter(pool: &PgPool, letter: &DeadLetter<'_>) -> Result<(), sqlx::Error> {
    let m = letter.message;
    let headers: Vec<serde_json::Value> = m.headers.iter().map(header_json).collect();
    sqlx::query(
        "INSERT INTO inbox_host.dead_letters
             (consumer_group, topic, kafka_partition, kafka_offset, message_id, reason,
              record_key, headers, payload, worker_id, failure_kind, attempts,
              plugin_digest, record_timestamp)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
                 to_timestamp($14::float8 / 1000))
         ON CONFLICT (consumer_group, topic, kafka_partition, kafka_offset)
             WHERE letter_kind = 'record' DO NOTHING",
    )
    .bind(letter.group)
    .bind(&m.topic)
    .bind(m.partition)
    .bind(m.offset)
    .bind(letter.message_id)
    .bind(super::storable_text(letter.reason, super::MAX_FAILURE_TEXT))
    .bind(m.key.as_deref())
    .bind(sqlx::types::Json(headers))
    .bind(&m.payload)
    .bind(letter.worker_id)
    .bind(letter.kind)
    .bind(i32::try_from(letter.attempts).unwrap_or(i32::MAX))
    .bind(letter.plugin_digest)
    .bind(m.timestamp_ms.map(|ms| ms as f64))
    .execute(pool)
    .await?;
    Ok(())
}

/// A header as JSON, losslessly: `key` and `value` hold text (`value` may be
/// null); text `jsonb` cannot hold (not UTF-8, or a NUL byte) is kept as
/// `key_hex`/`value_hex` instead, so a hostile header can never stop the row.
fn header_json(header: &Header) -> serde_json::Value {
    let mut json = serde_json::Map::new();
    if header.key.contains('\0') {
        json.insert("key_hex".into(), hex::encode(&header.key).into());
    } else {
        json.insert("key".into(), header.key.clone().into());
    }
    match header.value.as_deref() {
        None => {
            json.insert("value".into(), serde_json::Value::Null);
        }
        Some(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) if !text.contains('\0') => {
                json.insert("value".into(), text.into());
            }
            _ => {
                json.insert("value_hex".into(), hex::encode(bytes).into());
            }
        },
    }
    json.into()
}

/// A header read back from its JSON form ([`header_json`]'s inverse); a
/// malformed entry is an error naming it, never a silently dropped header.
fn header_of(json: &serde_json::Value) -> Result<Header, String> {
    let text = |field: &str| json.get(field).and_then(serde_json::Value::as_str);
    let bytes = |field: &str| -> Result<Option<Vec<u8>>, String> {
        text(field)
            .map(|h| hex::decode(h).map_err(|e| format!("{field} of header {json}: {e}")))
            .transpose()
    };
    let key = match (text("key"), bytes("key_hex")?) {
        (Some(key), _) => key.to_string(),
        (None, Some(raw)) => String::from_utf8(raw).map_err(|e| format!("header {json}: {e}"))?,
        (None, None) => return Err(format!("header without a key: {json}")),
    };
    let value = match (json.get("value"), bytes("value_hex")?) {
        (_, Some(raw)) => Some(raw),
        (Some(serde_json::Value::String(v)), None) => Some(v.clone().into_bytes()),
        _ => None,
    };
    Ok(Header { key, value })
}

/// Which dead letters to list or redrive.
#[derive(Debug, Clone, Default)]
pub struct LetterFilter {
    pub group: Option<String>,
    pub topic: Option<String>,
    /// Letters whose reason contains this text (case-insensitive).
    pub reason: Option<String>,
    /// Letters recorded at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Include letters already redriven.
    pub redriven: bool,
}

/// A dead letter as stored, without its key, headers and payload.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct LetterSummary {
    pub id: i64,
    pub consumer_group: String,
    pub topic: String,
    #[sqlx(rename = "kafka_partition")]
    pub partition: i32,
    #[sqlx(rename = "kafka_offset")]
    pub offset: i64,
    pub message_id: Option<String>,
    pub reason: String,
    pub failure_kind: Option<String>,
    pub attempts: Option<i32>,
    pub plugin_digest: Option<String>,
    pub record_timestamp: Option<DateTime<Utc>>,
    pub recorded_at: DateTime<Utc>,
    pub redrives: i32,
    pub redriven_at: Option<DateTime<Utc>>,
    pub redriven_by: Option<String>,
    pub redriven_to: Option<String>,
    /// `record` (a record set aside) or `request` (a request after commit
    /// that failed for good).
    pub letter_kind: String,
    /// For a request: its method, URL, key, ordering key, reply topic and the
    /// answer (status, headers, start of the body) or why none came.
    pub request: Option<sqlx::types::Json<serde_json::Value>>,
}

/// A dead letter with the record it keeps.
#[derive(Debug, Clone)]
pub struct StoredLetter {
    pub summary: LetterSummary,
    /// The original record (its `message_id` is the letter's, or empty).
    pub message: Message,
}

const SUMMARY_COLUMNS: &str = "id, consumer_group, topic, kafka_partition, kafka_offset, \
     message_id, reason, failure_kind, attempts, plugin_digest, record_timestamp, recorded_at, \
     redrives, redriven_at, redriven_by, redriven_to, letter_kind, request";

/// `SELECT <what> FROM inbox_host.dead_letters WHERE <filter>`, each filter
/// value bound, never spliced into the text.
fn matching(what: &str, filter: &LetterFilter) -> QueryBuilder<'static, Postgres> {
    let mut query = QueryBuilder::new(format!(
        "SELECT {what} FROM inbox_host.dead_letters WHERE true"
    ));
    if let Some(group) = &filter.group {
        query
            .push(" AND consumer_group = ")
            .push_bind(group.clone());
    }
    if let Some(topic) = &filter.topic {
        query.push(" AND topic = ").push_bind(topic.clone());
    }
    if let Some(reason) = &filter.reason {
        query
            .push(" AND strpos(lower(reason), lower(")
            .push_bind(reason.clone())
            .push(")) > 0");
    }
    if let Some(since) = filter.since {
        query.push(" AND recorded_at >= ").push_bind(since);
    }
    if !filter.redriven {
        query.push(" AND redrives = 0");
    }
    query
}

/// The letters matching `filter`, oldest first, at most `limit`, and how many match in all.
pub async fn list_letters(
    pool: &PgPool,
    filter: &LetterFilter,
    limit: i64,
) -> Result<(Vec<LetterSummary>, i64), sqlx::Error> {
    let mut page = matching(SUMMARY_COLUMNS, filter);
    page.push(" ORDER BY id LIMIT ").push_bind(limit);
    let letters = page.build_query_as().fetch_all(pool).await?;
    let total = matching("count(*)", filter)
        .build_query_scalar()
        .fetch_one(pool)
        .await?;
    Ok((letters, total))
}

/// The ids of the letters matching `filter`, oldest first.
pub async fn letter_ids(pool: &PgPool, filter: &LetterFilter) -> Result<Vec<i64>, sqlx::Error> {
    let mut ids = matching("id", filter);
    ids.push(" ORDER BY id");
    ids.build_query_scalar().fetch_all(pool).await
}

/// One letter with its record; `Ok(None)` when no letter has this id.
pub async fn show_letter(pool: &PgPool, id: i64) -> Result<Option<StoredLetter>, LetterError> {
    let mut conn = pool.acquire().await?;
    read_letter(&mut conn, id, "").await
}

/// Why a letter could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum LetterError {
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error("dead letter {id}: {why}")]
    Malformed { id: i64, why: String },
}

#[derive(sqlx::FromRow)]
struct LetterRow {
    #[sqlx(flatten)]
    summary: LetterSummary,
    record_key: Option<Vec<u8>>,
    headers: sqlx::types::Json<serde_json::Value>,
    payload: Option<Vec<u8>>,
}

async fn read_letter(
    conn: &mut sqlx::PgConnection,
    id: i64,
    lock: &str,
) -> Result<Option<StoredLetter>, LetterError> {
    let row: Option<LetterRow> = sqlx::query_as(&format!(
        "SELECT {SUMMARY_COLUMNS}, record_key, headers, payload
           FROM inbox_host.dead_letters WHERE id = $1 {lock}"
    ))
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let headers = row
        .headers
        .0
        .as_array()
        .ok_or_else(|| LetterError::Malformed {
            id,
            why: "headers are not a JSON array".into(),
        })?
        .iter()
        .map(header_of)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|why| LetterError::Malformed { id, why })?;
    let summary = row.summary;
    let message = Message {
        message_id: summary.message_id.clone().unwrap_or_default(),
        topic: summary.topic.clone(),
        partition: summary.partition,
        offset: summary.offset,
        timestamp_ms: summary.record_timestamp.map(|t| t.timestamp_millis()),
        key: row.record_key,
        headers,
        payload: row.payload.unwrap_or_default(),
    };
    Ok(Some(StoredLetter { summary, message }))
}

/// A letter locked for redriving: nobody else redrives it until this ends.
pub struct RedriveClaim {
    tx: Transaction<'static, Postgres>,
    pub letter: StoredLetter,
}

/// Locks letter `id` (waiting for a concurrent redrive of it to end);
/// `Ok(None)` when there is no such letter.
pub async fn claim_for_redrive(
    pool: &PgPool,
    id: i64,
) -> Result<Option<RedriveClaim>, LetterError> {
    let mut tx = pool.begin().await?;
    let letter = read_letter(&mut tx, id, "FOR UPDATE").await?;
    Ok(letter.map(|letter| RedriveClaim { tx, letter }))
}

impl RedriveClaim {
    /// Whether the letter is a request after commit (redriven by sending it
    /// again with its key, not by republishing a record).
    pub fn is_request(&self) -> bool {
        self.letter.summary.letter_kind == "request"
    }

    /// Queues the letter's request to be sent again, with the same
    /// `Idempotency-Key`, and records that `by` did so, now.
    pub async fn requeue(mut self, by: &str) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO inbox_host.requests
                 (consumer_group, idempotency_key, method, url, headers, body, ordering_key,
                  reply_topic, caused_by, topic, kafka_partition, kafka_offset)
             SELECT consumer_group, request->>'idempotency_key', request->>'method', request->>'url',
                    (SELECT coalesce(jsonb_agg(jsonb_build_array(h->>'key', h->'value')), '[]')
                       FROM jsonb_array_elements(headers) AS h),
                    coalesce(payload, ''), request->>'ordering_key', request->>'reply_topic',
                    coalesce(message_id, ''), topic, kafka_partition, kafka_offset
               FROM inbox_host.dead_letters WHERE id = $1 AND letter_kind = 'request'",
        )
        .bind(self.letter.summary.id)
        .execute(&mut *self.tx)
        .await?;
        let id = self.letter.summary.id;
        sqlx::query(
            "UPDATE inbox_host.dead_letters
                SET redrives = redrives + 1, redriven_at = now(), redriven_by = $2,
                    redriven_to = 'inbox_host.requests'
              WHERE id = $1",
        )
        .bind(id)
        .bind(by)
        .execute(&mut *self.tx)
        .await?;
        self.tx.commit().await
    }

    /// Records that the letter was republished to `to_topic` by `by`, now.
    pub async fn redriven(mut self, by: &str, to_topic: &str) -> Result<(), sqlx::Error> {
        sqlx::query(
            "UPDATE inbox_host.dead_letters
                SET redrives = redrives + 1, redriven_at = now(), redriven_by = $2, redriven_to = $3
              WHERE id = $1",
        )
        .bind(self.letter.summary.id)
        .bind(by)
        .bind(to_topic)
        .execute(&mut *self.tx)
        .await?;
        self.tx.commit().await
    }
}
