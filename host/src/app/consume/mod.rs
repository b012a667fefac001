//! The consume path: a worker per assigned partition takes its records in
//! order through the inbox runner (`pipeline`, `worker`), `decide` says what
//! happens to each after its outcome, and a record set aside goes to the
//! dead-letter table (and `--dead-letter-topic`). What the commands need from
//! here is re-exported below, never reached for in a file of this room.

mod dead_letter_topic;
mod decide;
mod failpoint;
mod lanes;
mod pending;
mod pipeline;
mod source;
mod worker;

pub use dead_letter_topic::{original_headers, DeadLetterTopic};
pub use decide::{decide, Backoff, RetryPolicy, Step};
pub use lanes::lane_of;
pub use pending::message_of;
pub use pipeline::{Pipeline, StopWhen};
pub use source::{HandlerSource, PipelineLimits};
