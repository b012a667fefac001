//! What the live group did with records, read from its inbox and dead letters
//! (for `inbox-host shadow`).

use std::collections::HashSet;

use sqlx::PgPool;

use super::Message;

/// What became of a record under the live group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LiveFate {
    /// Its inbox row is committed: the live version handled it.
    Processed,
    /// It was set aside as a dead letter.
    SetAside,
    /// Neither (not reached yet, being retried, or a strategy without the inbox).
    NotYet,
}

impl LiveFate {
    pub fn label(self) -> &'static str {
        match self {
            LiveFate::Processed => "processed",
            LiveFate::SetAside => "set_aside",
            LiveFate::NotYet => "not_yet",
        }
    }
}

/// The live fate of each of `messages`, in order.
pub async fn live_fates(
    pool: &PgPool,
    group: &str,
    messages: &[&Message],
) -> Result<Vec<LiveFate>, sqlx::Error> {
    let ids: Vec<&str> = messages.iter().map(|m| m.message_id.as_str()).collect();
    let processed: HashSet<String> = sqlx::query_scalar(
        "SELECT message_id FROM inbox_host.inbox
          WHERE consumer_group = $1
            AND dedupe_key = ANY(ARRAY(SELECT inbox_host.message_key($1, id) FROM unnest($2::text[]) id))
         UNION ALL
         SELECT message_id FROM inbox_host.inbox_before_0_4
          WHERE consumer_group = $1 AND message_id = ANY($2)",
    )
    .bind(group)
    .bind(&ids)
    .fetch_all(pool)
    .await?
    .into_iter()
    .collect();
    let topics: Vec<&str> = messages.iter().map(|m| m.topic.as_str()).collect();
    let partitions: Vec<i32> = messages.iter().map(|m| m.partition).collect();
    let offsets: Vec<i64> = messages.iter().map(|m| m.offset).collect();
    let set_aside: HashSet<(String, i32, i64)> = sqlx::query_as(
        "SELECT d.topic, d.kafka_partition, d.kafka_offset
           FROM inbox_host.dead_letters d
           JOIN unnest($2::text[], $3::int[], $4::bigint[]) AS r(topic, p, o)
             ON d.topic = r.topic AND d.kafka_partition = r.p AND d.kafka_offset = r.o
          WHERE d.consumer_group = $1",
    )
    .bind(group)
    .bind(&topics)
    .bind(&partitions)
    .bind(&offsets)
    .fetch_all(pool)
    .await?
    .into_iter()
    .collect();
    Ok(messages
        .iter()
        .map(|m| {
            if !m.message_id.is_empty() && processed.contains(&m.message_id) {
                LiveFate::Processed
            } else if set_aside.contains(&(m.topic.clone(), m.partition, m.offset)) {
                LiveFate::SetAside
            } else {
                LiveFate::NotYet
            }
        })
        .collect())
}
