//! What the new version would publish, compared with what the live version
//! published for the same records. The live messages are read back from the
//! publish topics: each carries the `message_id` derived from (group, incoming
//! id, position), so the live version's n-th message for a record is found by
//! its id, whatever partition it landed on and however often the relay sent it.
//! They are looked for among the last `--publications-last` records of each
//! partition of the publish topics (by offset, not time: a broker need not
//! index its records by time, and the window stays bounded).

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;

use crate::inbox::{outgoing_message_id, Message, Outgoing, RESERVED_HEADERS};
use crate::kafka::{self, IdSources, Record, Start};
use crate::plugin::DEFAULT_MAX_PUBLISH;

/// A record both versions handled, with what the new one would publish.
pub struct Candidate<'a> {
    pub message: &'a Message,
    pub outgoing: Vec<Outgoing>,
}

/// How the compared records came out.
#[derive(Default)]
pub struct Comparison {
    pub same: usize,
    /// Records whose publications differ, with what differs first.
    pub differ: Vec<(MessageAt, String)>,
}

/// Where a compared record was, for the report.
pub struct MessageAt {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub message_id: String,
}

/// Where the live version's messages are looked for.
pub struct LiveTopics<'a> {
    pub brokers: &'a str,
    pub extra: &'a [(String, String)],
    pub topics: &'a [String],
    /// Records read from the end of each partition.
    pub last: i64,
    pub within: Duration,
}

/// Reads the live version's messages from the end of the publish topics and
/// compares each candidate's publications with them.
pub async fn compare(
    group: &str,
    live: &LiveTopics<'_>,
    candidates: &[Candidate<'_>],
) -> anyhow::Result<Comparison> {
    if candidates.is_empty() || live.topics.is_empty() {
        return Ok(Comparison::default());
    }
    let (start, within) = (Start::Last(live.last), live.within);
    let ids: IdSources = "header:message_id".parse().map_err(anyhow::Error::msg)?;
    let (brokers, extra, topics) = (
        live.brokers.to_string(),
        live.extra.to_vec(),
        live.topics.to_vec(),
    );
    let records = tokio::task::spawn_blocking(move || {
        kafka::read_recent(&brokers, &extra, &topics, &ids, start, within)
    })
    .await??;
    Ok(compare_with(group, candidates, &records))
}

fn compare_with(group: &str, candidates: &[Candidate<'_>], live: &[Record]) -> Comparison {
    // Every id a candidate's run may have published live, to its (candidate, position).
    let mut expected = HashMap::new();
    for (c, candidate) in candidates.iter().enumerate() {
        for position in 0..DEFAULT_MAX_PUBLISH.max(candidate.outgoing.len()) {
            expected.insert(
                outgoing_message_id(group, &candidate.message.message_id, position),
                (c, position),
            );
        }
    }
    let mut published: Vec<HashMap<usize, &Record>> = vec![HashMap::new(); candidates.len()];
    for record in live {
        if let Some(&(c, position)) = record
            .message_id
            .as_ref()
            .ok()
            .and_then(|id| expected.get(id))
        {
            published[c].insert(position, record);
        }
    }
    let mut comparison = Comparison::default();
    for (candidate, live) in candidates.iter().zip(&published) {
        match difference(&candidate.outgoing, live) {
            None => comparison.same += 1,
            Some(what) => {
                let m = candidate.message;
                let at = MessageAt {
                    topic: m.topic.clone(),
                    partition: m.partition,
                    offset: m.offset,
                    message_id: m.message_id.clone(),
                };
                comparison.differ.push((at, what));
            }
        }
    }
    comparison
}

/// The first difference between what the new version would publish and the
/// live version's messages by position, if any.
fn difference(new: &[Outgoing], live: &HashMap<usize, &Record>) -> Option<String> {
    if new.len() != live.len() {
        return Some(format!(
            "publishes {} message(s), the live version published {}",
            new.len(),
            live.len()
        ));
    }
    for (position, outgoing) in new.iter().enumerate() {
        let Some(record) = live.get(&position) else {
            return Some(format!(
                "message {position}: the live version published none at this position"
            ));
        };
        let own_headers: Vec<(&str, Option<&[u8]>)> = record
            .headers
            .iter()
            .filter(|h| !RESERVED_HEADERS.contains(&h.key.as_str()))
            .map(|h| (h.key.as_str(), h.value.as_deref()))
            .collect();
        let new_headers: Vec<(&str, Option<&[u8]>)> = outgoing
            .headers
            .iter()
            .map(|h| (h.key.as_str(), h.value.as_deref()))
            .collect();
        let differs = if outgoing.topic != record.topic {
            Some(format!(
                "to {}, the live version's to {}",
                outgoing.topic, record.topic
            ))
        } else if outgoing.key != record.key {
            Some("another key".to_string())
        } else if outgoing.value != record.payload {
            Some("another value".to_string())
        } else if new_headers != own_headers {
            Some("other headers".to_string())
        } else {
            None
        };
        if let Some(what) = differs {
            return Some(format!("message {position}: {what}"));
        }
    }
    None
}

impl Comparison {
    /// The comparison for `--json`, with the first `examples` differences.
    pub fn to_json(&self, examples: usize) -> serde_json::Value {
        let shown: Vec<_> = self
            .differ
            .iter()
            .take(examples)
            .map(|(at, what)| {
                json!({
                    "topic": at.topic, "partition": at.partition, "offset": at.offset,
                    "message_id": at.message_id, "difference": what,
                })
            })
            .collect();
        json!({ "same": self.same, "differ": self.differ.len(), "examples": shown })
    }

    /// The comparison as report lines, with the first `examples` differences.
    pub fn print(&self, live: &LiveTopics<'_>, examples: usize) {
        println!(
            "publications against the live version's (read back from the last {} of each partition of {}): {} record(s) the same, {} differ",
            live.last,
            live.topics.join(", "),
            self.same,
            self.differ.len()
        );
        for (at, what) in self.differ.iter().take(examples) {
            println!(
                "  {}/{}@{} {}: {what}",
                at.topic, at.partition, at.offset, at.message_id
            );
        }
    }
}
