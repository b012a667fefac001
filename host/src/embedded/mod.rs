//! Throwaway infrastructure for the lab, the demo and the tests: a PostgreSQL
//! cluster in a temp dir and a local Kafka-protocol broker (librdkafka's mock
//! cluster). Nothing on the production path uses this module.

mod broker;
mod postgres;

pub use broker::LocalBroker;
pub use postgres::{Durability, TempPostgres};
