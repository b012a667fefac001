//! What happened to a delivered record, as the consume path reports it to
//! observers, metrics and traces: the leaf both rooms read.

use crate::inbox::{Message, Outcome};

/// What happened to one delivered record, as reported to an observer.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub message_id: Option<String>,
    pub verdict: Verdict,
    /// Whether it was acknowledged (its offset stored, or committed before it
    /// was handled).
    pub committed: bool,
}

impl Delivery {
    pub(crate) fn of(message: &Message, verdict: Verdict, committed: bool) -> Self {
        Self {
            topic: message.topic.clone(),
            partition: message.partition,
            offset: message.offset,
            message_id: Some(message.message_id.clone()).filter(|id| !id.is_empty()),
            verdict,
            committed,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The runner's outcome.
    Handled(Outcome),
    /// Not handled: recorded in `inbox_host.dead_letters` with this reason.
    SetAside(String),
}
