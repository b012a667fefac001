//! `inbox-host shadow`: a new plugin version tried on the group's recent
//! records, each in a transaction that is always rolled back, outside the
//! group, and compared with what the live version did with the same record,
//! down to the messages it published. Nothing leaves: requests after commit are
//! counted per origin, and a record whose handler calls out (it needs the
//! answer, which only sending gets) is reported as not comparable.

mod publications;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::json;

use crate::cli::ShadowArgs;
use crate::egress::origin_of;
use crate::inbox::{
    self, FailureKind, LiveFate, Message, Outcome, Outgoing, Runner, RunnerSettings,
};
use crate::kafka::{self, IdSources, Start};
use crate::plugin::{PublishLimits, RequestLimits, Runtime, SandboxLimits};

/// How long reading the records may take in all.
const READ_WITHIN: Duration = Duration::from_secs(120);

/// One record tried: where it was, how the new version did and what it would
/// publish, what the live one did.
struct Tried {
    message: Message,
    outcome: Outcome,
    outgoing: Vec<Outgoing>,
    live: LiveFate,
}

/// Messages the version would have published, per topic (never sent); and
/// requests after commit it would have asked for, per origin.
type WouldPublish = BTreeMap<String, usize>;

/// Whether the run failed only because a call in the handler is not sent here.
fn made_a_call(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Failed(e)
        if e.kind == FailureKind::RequestRule && e.message.contains(crate::plugin::CALL_NOT_SENT))
}

/// Runs the shadow and prints its report; an error when the new version fails
/// records the live version processed (so a deploy script can gate on it).
pub async fn shadow(args: ShadowArgs) -> anyhow::Result<()> {
    let url = args.database.required()?;
    let ids: IdSources = args
        .message_id
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--message-id: {e}"))?;
    let extra = crate::app::settings::kafka_options(&args.kafka_opts)
        .map_err(|bad| anyhow::anyhow!("{}", bad.join("\n  ")))?;
    let allow = crate::egress::AllowList::parse(&args.http_allow)
        .map_err(|bad| anyhow::anyhow!("{}", bad.join("\n  ")))?;
    let limits = SandboxLimits {
        publish: PublishLimits {
            topics: args.publish_topics.clone(),
            ..PublishLimits::default()
        },
        requests: RequestLimits {
            group: args.group.clone(),
            allow: std::sync::Arc::new(allow),
            reply_topics: args.publish_topics.clone(),
            ..RequestLimits::default()
        },
        ..SandboxLimits::default()
    };
    let runtime = Runtime::with_compile_cache(limits, args.compile_cache.dir().as_deref())?;
    let plugin = crate::plugin::Plugin::load_checked(&runtime, &args.plugin).await?;
    let start = match args.from_offset {
        Some(offset) => Start::Offset(offset),
        None => Start::Last(args.last),
    };
    let (brokers, topics, options) = (args.brokers.clone(), args.topics.clone(), extra.clone());
    let records = tokio::task::spawn_blocking(move || {
        kafka::read_recent(&brokers, &options, &topics, &ids, start, READ_WITHIN)
    })
    .await?
    .with_context(|| {
        format!(
            "reading the records of {} at {}",
            args.topics.join(", "),
            args.brokers
        )
    })?;

    let pool = crate::app::database::connect(url, 2).await?;
    let runner = Runner::new(
        pool.clone(),
        RunnerSettings {
            guest_role: Some(args.guest_role.clone()).filter(|r| !r.trim().is_empty()),
            ..RunnerSettings::defaults(&args.group, "shadow")
        },
    );
    let mut tried = Vec::with_capacity(records.len());
    let mut would_publish = WouldPublish::new();
    let mut would_request = WouldPublish::new();
    for record in records {
        let (message, unusable) = crate::app::consume::message_of(record);
        let (outcome, outgoing) = match unusable {
            Some(why) => (
                Outcome::Failed(inbox::HandlerError::new(
                    inbox::FailureKind::HandlerError,
                    false,
                    format!("unusable record: {why}"),
                )),
                Vec::new(),
            ),
            // Requests after commit are never sent from a shadow run: its
            // transaction rolls back, so nothing reaches the requests table.
            None => {
                let (outcome, after_commit) = runner.rehearse(&message, &plugin).await;
                for r in &after_commit.requests {
                    *would_request.entry(origin_of(&r.url)).or_default() += 1;
                }
                (outcome, after_commit.messages)
            }
        };
        for o in &outgoing {
            *would_publish.entry(o.topic.clone()).or_default() += 1;
        }
        tried.push(Tried {
            message,
            outcome,
            outgoing,
            live: LiveFate::NotYet,
        });
    }
    let messages: Vec<&Message> = tried.iter().map(|t| &t.message).collect();
    let fates = inbox::live_fates(&pool, &args.group, &messages).await?;
    for (t, live) in tried.iter_mut().zip(fates) {
        t.live = live;
    }
    // Records both versions handled: what they publish can be compared.
    let candidates: Vec<publications::Candidate> = tried
        .iter()
        .filter(|t| t.live == LiveFate::Processed && t.outcome.committed())
        .map(|t| publications::Candidate {
            message: &t.message,
            outgoing: t.outgoing.clone(),
        })
        .collect();
    let live_topics = publications::LiveTopics {
        brokers: &args.brokers,
        extra: &extra,
        topics: &args.publish_topics,
        last: args.publications_last,
        within: READ_WITHIN,
    };
    let compared = if args.publish_topics.is_empty() {
        None
    } else {
        let compared = publications::compare(&args.group, &live_topics, &candidates)
            .await
            .with_context(|| {
                format!(
                    "reading what the live version published to {}",
                    args.publish_topics.join(", ")
                )
            })?;
        Some(compared)
    };
    let regressions = tried
        .iter()
        .filter(|t| t.live == LiveFate::Processed && !t.outcome.committed())
        .filter(|t| !made_a_call(&t.outcome))
        .count();
    let calling = tried.iter().filter(|t| made_a_call(&t.outcome)).count();
    let digest = crate::inbox::Handler::version(&plugin).to_string();
    if args.json {
        let mut report = report_json(&digest, &tried, regressions, args.examples);
        report["would_publish"] = json!(would_publish);
        report["would_request"] = json!(would_request);
        report["not_compared_calls"] = json!(calling);
        if let Some(compared) = &compared {
            report["publications"] = compared.to_json(args.examples);
        }
        println!("{report}");
    } else {
        print_report(&digest, &args.group, &tried, regressions, args.examples);
        print_would_publish(&would_publish);
        print_would_request(&would_request, calling);
        if let Some(compared) = &compared {
            compared.print(&live_topics, args.examples);
        }
    }
    if regressions > 0 {
        bail!(
            "{regressions} record(s) the live version processed fail on {}",
            args.plugin.display()
        );
    }
    Ok(())
}

/// What the version would have published, per topic (never sent).
fn print_would_publish(would_publish: &WouldPublish) {
    if would_publish.is_empty() {
        println!("would publish: nothing");
        return;
    }
    let per_topic: Vec<String> = would_publish
        .iter()
        .map(|(topic, n)| format!("{n} to {topic}"))
        .collect();
    println!("would publish (not sent): {}", per_topic.join(", "));
}

/// Requests after commit per origin, and the records not compared because
/// their handler calls out.
fn print_would_request(would_request: &WouldPublish, calling: usize) {
    if !would_request.is_empty() {
        let per_origin: Vec<String> = would_request
            .iter()
            .map(|(origin, n)| format!("{n} to {origin}"))
            .collect();
        println!(
            "would request after commit (not sent): {}",
            per_origin.join(", ")
        );
    }
    if calling > 0 {
        println!(
            "{calling} record(s) not compared: the handler calls out (a call in the handler), which a shadow run does not send"
        );
    }
}

/// `processed`, `failed handler-error`, `not sent: calls out`, …: how the new
/// version did.
fn outcome_label(outcome: &Outcome) -> String {
    match outcome {
        o if made_a_call(o) => "not compared: calls out".to_string(),
        Outcome::Failed(e) => format!("failed {}", e.kind),
        other => other.label().to_string(),
    }
}

/// Counts per (new version's outcome, live fate).
fn tally(tried: &[Tried]) -> BTreeMap<(String, LiveFate), usize> {
    let mut counts = BTreeMap::new();
    for t in tried {
        *counts
            .entry((outcome_label(&t.outcome), t.live))
            .or_default() += 1;
    }
    counts
}

/// The first `per_kind` failures of each kind, regressions first.
fn examples(tried: &[Tried], per_kind: usize) -> Vec<&Tried> {
    let mut failed: Vec<&Tried> = tried.iter().filter(|t| !t.outcome.committed()).collect();
    failed.sort_by_key(|t| t.live != LiveFate::Processed);
    let mut shown: BTreeMap<String, usize> = BTreeMap::new();
    failed
        .into_iter()
        .filter(|t| {
            let n = shown.entry(outcome_label(&t.outcome)).or_default();
            *n += 1;
            *n <= per_kind
        })
        .collect()
}

fn error_of(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Failed(e) => e.message.clone(),
        other => other.label().to_string(),
    }
}

fn report_json(
    digest: &str,
    tried: &[Tried],
    regressions: usize,
    per_kind: usize,
) -> serde_json::Value {
    let summary: Vec<_> = tally(tried)
        .into_iter()
        .map(|((outcome, live), count)| json!({ "outcome": outcome, "live": live.label(), "count": count }))
        .collect();
    let examples: Vec<_> = examples(tried, per_kind)
        .into_iter()
        .map(|t| {
            json!({
                "topic": t.message.topic, "partition": t.message.partition, "offset": t.message.offset,
                "message_id": t.message.message_id, "outcome": outcome_label(&t.outcome),
                "live": t.live.label(), "error": error_of(&t.outcome),
            })
        })
        .collect();
    json!({
        "plugin": digest, "records": tried.len(), "summary": summary,
        "regressions": regressions, "examples": examples,
    })
}

fn print_report(digest: &str, group: &str, tried: &[Tried], regressions: usize, per_kind: usize) {
    println!(
        "shadow run of {digest} on the records of group {group}: {} record(s), all rolled back",
        tried.len()
    );
    println!(
        "{:<32} {:>10} {:>10} {:>10}",
        "this version \\ live", "processed", "set aside", "not yet"
    );
    let counts = tally(tried);
    let mut rows: Vec<&String> = counts.keys().map(|(outcome, _)| outcome).collect();
    rows.dedup();
    for outcome in rows {
        let n = |fate| counts.get(&(outcome.clone(), fate)).copied().unwrap_or(0);
        println!(
            "{outcome:<32} {:>10} {:>10} {:>10}",
            n(LiveFate::Processed),
            n(LiveFate::SetAside),
            n(LiveFate::NotYet)
        );
    }
    if regressions > 0 {
        println!("{regressions} record(s) the live version processed fail on this version");
    }
    let shown = examples(tried, per_kind);
    if !shown.is_empty() {
        println!("examples:");
    }
    for t in shown {
        println!(
            "  {} {}/{}@{} {} (live: {}): {}",
            outcome_label(&t.outcome),
            t.message.topic,
            t.message.partition,
            t.message.offset,
            t.message.message_id,
            t.live.label(),
            error_of(&t.outcome)
        );
    }
}
