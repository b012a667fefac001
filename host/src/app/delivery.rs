//! What happened to a delivered record, as the consume path reports it to
//! observers (the lab, tests): the leaf both rooms read.

use crate::inbox::{Message, Outcome};

/// What happened to one delivered record, as reported to an observer.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub message_id: Option<String>,
    pub outcome: Outcome,
    /// Whether it was acknowledged (its offset stored, or committed before it
    /// was handled); `false` when it is tried again.
    pub acknowledged: bool,
}

impl Delivery {
    pub(crate) fn of(message: &Message, outcome: Outcome, acknowledged: bool) -> Self {
        Self {
            topic: message.topic.clone(),
            partition: message.partition,
            offset: message.offset,
            message_id: Some(message.message_id.clone()).filter(|id| !id.is_empty()),
            outcome,
            acknowledged,
        }
    }
}
