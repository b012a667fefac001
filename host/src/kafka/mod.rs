//! The Kafka side: a consumer in a group with auto commit off, records in,
//! offset commits out, and rewinding a partition to a failed record.
//!
//! Architecture invariant: this module knows nothing about SQL or WebAssembly.
//! It hands out plain [`Record`]s and commits offsets when told to.

mod admin;
mod consumer;
mod context;
mod message_id;
mod producer;
mod record;

pub use admin::topic_retention;
pub use consumer::{Backoff, Consumer, ConsumerSettings, Retry};
pub use message_id::{IdSource, IdSources};
pub use producer::{committed_offset, produce, OutgoingRecord};
pub use record::{Record, RecordHeader};
