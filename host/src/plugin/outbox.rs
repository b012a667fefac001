//! What a guest publishes through the WIT `outbox` interface (bound on
//! `DbSession` in `db_session.rs`): checked against its limits and the rules in
//! `handed_over.rs`, and kept for the runner, which stores it in the inbox
//! transaction when the handler succeeds.

use super::bindings::inbox::host::outbox::{Message, PublishError};
use super::handed_over::{check_header, Budget, Refusals};
use super::limits::PublishLimits;
use crate::inbox::{Header, Outgoing, RESERVED_HEADERS, RESERVED_HEADER_PREFIXES};

/// Codes of a refused message (docs/wit.md).
const TOPIC_NOT_ALLOWED: &str = "IH010";
const TOO_MANY: &str = "IH011";
const TOO_LARGE: &str = "IH012";
const BAD_HEADER: &str = "IH013";

/// One message's publications.
pub(crate) struct OutboxSession {
    limits: PublishLimits,
    published: Vec<Outgoing>,
    /// What this record's publications may hold in all (`--max-publish-bytes`).
    budget: Budget,
    /// The first refused message: the run fails whatever the guest returns.
    pub refused: Option<PublishError>,
    pub refusals: Refusals,
}

impl OutboxSession {
    pub fn new(limits: PublishLimits) -> Self {
        Self {
            budget: Budget::new(limits.max_record_bytes),
            limits,
            published: Vec::new(),
            refused: None,
            refusals: Refusals::default(),
        }
    }

    /// Forgets the previous message's publications (a reused instance).
    pub fn next_message(&mut self) {
        self.published.clear();
        self.budget.reset();
        self.refused = None;
        self.refusals.reset();
    }

    /// What the guest published, in order.
    pub fn take(&mut self) -> Vec<Outgoing> {
        std::mem::take(&mut self.published)
    }

    /// Keeps the message, or refuses it (the first refusal fails the run).
    pub fn publish(&mut self, message: Message) -> Result<(), PublishError> {
        let kept = self.keep(message);
        if let Err(e) = &kept {
            self.refusals.note("publication", &e.code, &e.message);
            self.refused.get_or_insert_with(|| e.clone());
        }
        kept
    }

    fn keep(&mut self, message: Message) -> Result<(), PublishError> {
        let refused = |code: &str, message: String| PublishError {
            code: code.to_string(),
            message,
        };
        let limits = &self.limits;
        if !limits.topics.contains(&message.topic) {
            return Err(refused(
                TOPIC_NOT_ALLOWED,
                topic_refused(&message.topic, &limits.topics),
            ));
        }
        if self.published.len() >= limits.max_messages {
            return Err(refused(
                TOO_MANY,
                format!(
                    "a record's run may publish at most {} messages (--max-publish)",
                    limits.max_messages
                ),
            ));
        }
        let mut bytes = message.value.len() + message.key.as_ref().map_or(0, Vec::len);
        for h in &message.headers {
            check_header(
                &h.key,
                h.value.as_deref(),
                RESERVED_HEADERS,
                RESERVED_HEADER_PREFIXES,
            )
            .map_err(|why| refused(BAD_HEADER, why))?;
            bytes += h.key.len() + h.value.as_ref().map_or(0, Vec::len);
        }
        if bytes > limits.max_message_bytes {
            return Err(refused(
                TOO_LARGE,
                format!(
                    "a message to {:?} of {bytes} bytes is over --max-message-bytes ({})",
                    message.topic, limits.max_message_bytes
                ),
            ));
        }
        if let Err(total) = self.budget.spend(bytes) {
            return Err(refused(
                TOO_LARGE,
                format!(
                    "this message of {bytes} bytes would bring the record's publications to \
                     {total} bytes, over --max-publish-bytes ({})",
                    self.budget.max()
                ),
            ));
        }
        let headers = message
            .headers
            .into_iter()
            .map(|h| Header {
                key: h.key,
                value: h.value,
            })
            .collect();
        self.published.push(Outgoing {
            topic: message.topic,
            key: message.key,
            value: message.value,
            headers,
        });
        Ok(())
    }
}

/// Why a publication to `topic` is refused, and what allows it.
fn topic_refused(topic: &str, allowed: &[String]) -> String {
    let allowed = match allowed {
        [] => "none".to_string(),
        topics => topics.join(", "),
    };
    if topic.trim().is_empty() {
        return format!(
            "the message has no topic (an empty name); give it one of the topics the host \
             allows (allowed: {allowed})"
        );
    }
    format!(
        "publishing to topic {topic:?} is not allowed (allowed: {allowed}); start the host \
         with --publish-topic {topic} to allow it"
    )
}

#[cfg(test)]
mod tests {
    use super::topic_refused;

    #[test]
    fn a_refused_topic_names_the_flag_and_an_empty_one_says_it_is_missing() {
        let allowed = ["invoices".to_string()];
        let elsewhere = topic_refused("payments", &allowed);
        assert!(
            elsewhere.contains("--publish-topic payments"),
            "{elsewhere}"
        );
        assert!(elsewhere.contains("allowed: invoices"), "{elsewhere}");
        let empty = topic_refused("", &allowed);
        assert!(empty.contains("no topic"), "{empty}");
        assert!(!empty.contains("--publish-topic  "), "{empty}");
        assert!(topic_refused(" ", &[]).contains("allowed: none"));
    }
}
