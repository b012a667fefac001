//! `inbox-host dead-letters list | show | redrive`: what an operator does with
//! records the host set aside, after fixing what made them fail.

use std::io::IsTerminal;

use anyhow::{bail, Context};
use chrono::{DateTime, Utc};
use serde_json::json;

use crate::cli::{DeadLettersArgs, LetterAction, LetterFilterArgs, RedriveArgs};
use crate::inbox::{self, Header, LetterFilter, LetterSummary, StoredLetter};
use crate::kafka::{Publication, Publisher};

/// Runs one `dead-letters` action; an error says what went wrong and, for a
/// redrive, which letters were not redriven.
pub async fn dead_letters(args: DeadLettersArgs) -> anyhow::Result<()> {
    // Every flag is checked before connecting.
    let url = args.database.required()?;
    match args.action {
        LetterAction::List { filter, limit } => {
            let filter = filter_of(&filter, Utc::now())?;
            let pool = crate::app::database::connect(url, 2).await?;
            let (letters, total) = inbox::list_letters(&pool, &filter, limit.max(0)).await?;
            if args.json {
                println!("{}", json!({ "total": total, "letters": letters }));
            } else {
                print_table(&letters, total);
            }
            Ok(())
        }
        LetterAction::Show { id } => {
            let pool = crate::app::database::connect(url, 2).await?;
            let Some(letter) = inbox::show_letter(&pool, id).await? else {
                bail!("no dead letter {id}: see `inbox-host dead-letters list`");
            };
            if args.json {
                println!("{}", letter_json(&letter));
            } else {
                print_letter(&letter);
            }
            Ok(())
        }
        LetterAction::Redrive(redrive) => {
            let selection = Selection::of(&redrive)?;
            let extra = crate::app::settings::kafka_options(&redrive.kafka_opts)
                .map_err(|bad| anyhow::anyhow!("{}", bad.join("\n  ")))?;
            let publisher = Publisher::new(&redrive.brokers, &extra)
                .with_context(|| format!("the producer for {}", redrive.brokers))?;
            let pool = crate::app::database::connect(url, 2).await?;
            let ids = match selection {
                Selection::Ids(ids) => ids,
                Selection::Matching(filter) => inbox::letter_ids(&pool, &filter).await?,
            };
            redrive_letters(&pool, &publisher, ids, &redrive, args.json).await
        }
    }
}

/// The letters a redrive is about.
enum Selection {
    Ids(Vec<i64>),
    Matching(LetterFilter),
}

impl Selection {
    fn of(args: &RedriveArgs) -> anyhow::Result<Self> {
        let f = &args.filter;
        let filtered = f.group.is_some()
            || f.topic.is_some()
            || f.reason.is_some()
            || f.since.is_some()
            || f.include_redriven;
        match (args.all, args.ids.is_empty()) {
            (true, _) => Ok(Self::Matching(filter_of(f, Utc::now())?)),
            (false, false) if filtered => bail!(
                "--group, --topic, --reason, --since and --include-redriven select letters for --all; with ids, pass only the ids"
            ),
            (false, false) => Ok(Self::Ids(args.ids.clone())),
            (false, true) => {
                bail!("name the letters to redrive (ids from `list`), or pass --all with filters")
            }
        }
    }
}

/// The filter the flags describe; `--since` is a time or an age before `now`.
pub fn filter_of(args: &LetterFilterArgs, now: DateTime<Utc>) -> anyhow::Result<LetterFilter> {
    let since = args
        .since
        .as_deref()
        .map(|since| parse_since(since, now))
        .transpose()?;
    Ok(LetterFilter {
        group: args.group.clone(),
        topic: args.topic.clone(),
        reason: args.reason.clone(),
        since,
        redriven: args.include_redriven,
    })
}

/// `2026-12-03T10:00:00Z`, or an age: `90s`, `30m`, `2h`, `7d`.
fn parse_since(text: &str, now: DateTime<Utc>) -> anyhow::Result<DateTime<Utc>> {
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        return Ok(time.with_timezone(&Utc));
    }
    let (amount, unit) = text.split_at(text.len() - text.chars().last().map_or(0, char::len_utf8));
    let unit_seconds: i64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => 0,
    };
    let age = amount
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 0 && unit_seconds > 0)
        .and_then(|n| n.checked_mul(unit_seconds))
        .and_then(chrono::Duration::try_seconds);
    match age.and_then(|age| now.checked_sub_signed(age)) {
        Some(since) => Ok(since),
        None => {
            bail!("--since {text}: give a time (2026-12-03T10:00:00Z) or an age (90s, 30m, 2h, 7d) of at most a few thousand years")
        }
    }
}

async fn redrive_letters(
    pool: &sqlx::PgPool,
    publisher: &Publisher,
    ids: Vec<i64>,
    args: &RedriveArgs,
    json_output: bool,
) -> anyhow::Result<()> {
    let by = args.by.clone().unwrap_or_else(default_operator);
    let mut refused = Vec::new();
    for id in ids {
        match redrive_one(pool, publisher, id, args, &by).await {
            Ok(Redriven::Record(topic, partition, offset)) => {
                if json_output {
                    println!(
                        "{}",
                        json!({ "id": id, "redriven": true, "topic": topic, "partition": partition, "offset": offset })
                    );
                } else {
                    println!("redrove dead letter {id} to {topic} (partition {partition}, offset {offset})");
                }
            }
            Ok(Redriven::Request(key)) => {
                if json_output {
                    println!("{}", json!({ "id": id, "redriven": true, "request": key }));
                } else {
                    println!("redrove dead letter {id}: its request is queued to be sent again with Idempotency-Key {key}");
                }
            }
            Err(e) => {
                if json_output {
                    println!(
                        "{}",
                        json!({ "id": id, "redriven": false, "error": format!("{e:#}") })
                    );
                } else {
                    eprintln!("dead letter {id} not redriven: {e:#}");
                }
                refused.push(id);
            }
        }
    }
    if refused.is_empty() {
        Ok(())
    } else {
        bail!("{} dead letter(s) not redriven: {refused:?}", refused.len())
    }
}

/// Where a redriven letter went.
enum Redriven {
    /// Its record was republished: topic, partition, offset.
    Record(String, i32, i64),
    /// Its request was queued to be sent again, with this key.
    Request(String),
}

/// Publishes one letter (or, for a request, queues it again) and marks it, in
/// that order, with the letter locked throughout: a failed publish leaves it
/// unmarked, a concurrent redrive waits.
async fn redrive_one(
    pool: &sqlx::PgPool,
    publisher: &Publisher,
    id: i64,
    args: &RedriveArgs,
    by: &str,
) -> anyhow::Result<Redriven> {
    let Some(claim) = inbox::claim_for_redrive(pool, id).await? else {
        bail!("no dead letter {id}");
    };
    let summary = &claim.letter.summary;
    if summary.redrives > 0 && !args.again {
        bail!(
            "already redriven {} time(s), last at {} by {} to {}; pass --again to redrive it again",
            summary.redrives,
            summary
                .redriven_at
                .map(|t| t.to_rfc3339())
                .unwrap_or_default(),
            summary.redriven_by.as_deref().unwrap_or("?"),
            summary.redriven_to.as_deref().unwrap_or("?"),
        );
    }
    if claim.is_request() {
        let key = claim
            .letter
            .summary
            .request
            .as_ref()
            .and_then(|r| r.0["idempotency_key"].as_str().map(str::to_string))
            .unwrap_or_default();
        claim
            .requeue(by)
            .await
            .context("queueing the request to be sent again")?;
        return Ok(Redriven::Request(key));
    }
    let message = &claim.letter.message;
    let topic = args
        .to_topic
        .clone()
        .unwrap_or_else(|| message.topic.clone());
    let headers = crate::app::consume::original_headers(message);
    let (partition, offset) = publisher
        .publish(&Publication {
            topic: &topic,
            key: message.key.as_deref(),
            headers: &headers,
            payload: Some(&message.payload),
            // The original's: a second redrive of the letter then meets the
            // first copy's inbox row (same partition), as the same record would.
            timestamp_ms: message.timestamp_ms,
        })
        .await
        .with_context(|| format!("publishing to {topic}"))?;
    claim
        .redriven(by, &topic)
        .await
        .context("marking the letter redriven (it was published)")?;
    Ok(Redriven::Record(topic, partition, offset))
}

fn default_operator() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    format!("{user}@{}", gethostname::gethostname().to_string_lossy())
}

fn print_table(letters: &[LetterSummary], total: i64) {
    let terminal = std::io::stdout().is_terminal();
    println!(
        "{:>6}  {:<16}  {:<28}  {:<20}  {:<14}  {:>3}  {:<20}  REASON",
        "ID", "GROUP", "RECORD (topic/partition@offset)", "MESSAGE ID", "KIND", "TRY", "RECORDED"
    );
    for l in letters {
        let record = format!("{}/{}@{}", l.topic, l.partition, l.offset);
        let mut reason = l.reason.replace('\n', " ");
        if terminal && reason.chars().count() > 60 {
            reason = reason.chars().take(59).collect::<String>() + "…";
        }
        if l.redrives > 0 {
            reason = format!("[redriven ×{}] {reason}", l.redrives);
        }
        println!(
            "{:>6}  {:<16}  {:<28}  {:<20}  {:<14}  {:>3}  {:<20}  {reason}",
            l.id,
            l.consumer_group,
            record,
            l.message_id.as_deref().unwrap_or("-"),
            l.failure_kind.as_deref().unwrap_or("-"),
            l.attempts.map_or("-".to_string(), |a| a.to_string()),
            l.recorded_at.format("%Y-%m-%d %H:%M:%S"),
        );
    }
    println!("{} of {total} dead letter(s)", letters.len());
}

fn print_letter(letter: &StoredLetter) {
    let (s, m) = (&letter.summary, &letter.message);
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    println!("dead letter {}", s.id);
    for (label, value) in [
        ("group", s.consumer_group.clone()),
        (
            "record",
            format!("{} partition {} offset {}", s.topic, s.partition, s.offset),
        ),
        ("message id", or_dash(s.message_id.clone())),
        ("reason", s.reason.clone()),
        ("failure kind", or_dash(s.failure_kind.clone())),
        ("attempts", or_dash(s.attempts.map(|a| a.to_string()))),
        ("plugin", or_dash(s.plugin_digest.clone())),
        (
            "produced at",
            or_dash(s.record_timestamp.map(|t| t.to_rfc3339())),
        ),
        ("recorded at", s.recorded_at.to_rfc3339()),
        (
            "redriven",
            match (&s.redriven_at, &s.redriven_by, &s.redriven_to) {
                (Some(at), by, to) => format!(
                    "{} time(s), last at {} by {} to {}",
                    s.redrives,
                    at.to_rfc3339(),
                    by.as_deref().unwrap_or("?"),
                    to.as_deref().unwrap_or("?")
                ),
                _ => "no".into(),
            },
        ),
        ("key", m.key.as_deref().map_or("(none)".into(), shown)),
    ] {
        println!("  {label:<13} {value}");
    }
    println!("  headers");
    for Header { key, value } in &m.headers {
        println!(
            "    {key}: {}",
            value.as_deref().map_or("(null)".into(), shown)
        );
    }
    println!("  payload ({} bytes)", m.payload.len());
    println!("{}", shown(&m.payload));
}

/// Bytes as text when they are UTF-8 (escaped), else as hex.
fn shown(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.escape_debug().to_string(),
        Err(_) => format!("hex:{}", hex::encode(bytes)),
    }
}

/// Bytes in JSON: `{"text": …}` when UTF-8, else `{"hex": …}`.
fn bytes_json(bytes: &[u8]) -> serde_json::Value {
    match std::str::from_utf8(bytes) {
        Ok(text) => json!({ "text": text }),
        Err(_) => json!({ "hex": hex::encode(bytes) }),
    }
}

fn letter_json(letter: &StoredLetter) -> serde_json::Value {
    let m = &letter.message;
    let mut value = serde_json::to_value(&letter.summary).unwrap_or_default();
    value["key"] = m.key.as_deref().map_or(serde_json::Value::Null, bytes_json);
    value["headers"] = m
        .headers
        .iter()
        .map(|h| json!({ "key": h.key, "value": h.value.as_deref().map(bytes_json) }))
        .collect();
    value["payload"] = bytes_json(&m.payload);
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_a_time_or_an_age() {
        let now = DateTime::parse_from_rfc3339("2026-12-03T12:00:00Z")
            .expect("time")
            .with_timezone(&Utc);
        let at = |t: &str| parse_since(t, now).map(|t| t.to_rfc3339()).ok();
        assert_eq!(
            at("2026-12-01T08:30:00Z").as_deref(),
            Some("2026-12-01T08:30:00+00:00")
        );
        assert_eq!(at("90s").as_deref(), Some("2026-12-03T11:58:30+00:00"));
        assert_eq!(at("2h").as_deref(), Some("2026-12-03T10:00:00+00:00"));
        assert_eq!(at("7d").as_deref(), Some("2026-11-26T12:00:00+00:00"));
        for bad in [
            "",
            "h",
            "2w",
            "-1h",
            "yesterday",
            "2026-12-01",
            "5é",
            "é",
            "9223372036854775807d",
            "99999999999d",
        ] {
            assert_eq!(at(bad), None, "{bad}");
        }
    }
}
