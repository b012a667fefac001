//! The Kafka side: a member of a consumer group whose assigned partitions each
//! arrive as an ordered stream of their own, records in, offsets stored out.
//!
//! Architecture invariant: this module knows nothing about SQL or WebAssembly.
//! It hands out plain [`Record`]s and stores an offset when told a record is
//! done; librdkafka commits what was stored. No rdkafka type crosses its API.

mod admin;
mod connection;
mod consumer;
mod context;
mod error;
mod membership;
mod message_id;
mod partition;
mod poison;
mod producer;
mod publisher;
mod record;
mod settings;
mod snapshot;

pub use admin::{create_topic, delete_topics, refused_credentials, topic_retention, uses_sasl};
pub use consumer::{Consumer, GroupHealth, LEAVE_WITHIN, LEAVE_WITHIN_UNREACHABLE};
pub use error::{KafkaError, KafkaResult};
pub use membership::{CoordinatorView, NOTICE_AFTER, REJOIN_AFTER};
pub use message_id::{IdSource, IdSources};
pub use partition::{PartitionStream, StopSignal, Watermark};
pub use producer::{
    committed_offset, committed_offsets, high_watermarks, produce, produce_with, OutgoingRecord,
};
pub use publisher::{check_topic_name, Publication, Publisher};
pub use record::{Record, RecordHeader};
pub use settings::{
    check_config, check_extra, ConsumerSettings, DEFAULT_REVOKE_GRACE, MAX_POLL_INTERVAL_MS,
    OWNED_PROPERTIES, REVOKE_MARGIN_MS, SESSION_TIMEOUT_MS,
};
pub use snapshot::{read_recent, Start};

/// The version of librdkafka linked in (for `--version` and build info).
pub fn librdkafka_version() -> String {
    rdkafka::util::get_rdkafka_version().1
}
