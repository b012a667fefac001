//! Throwaway infrastructure and fixtures for the lab, the demo and the tests: a
//! PostgreSQL cluster in a temp dir, a local Kafka-protocol broker (librdkafka's
//! mock cluster) and `NativeBilling`, billing written natively in Rust (the
//! lab's handler and the benchmark's yardstick). Nothing on the production path
//! uses this module.

mod broker;
mod native_billing;
mod postgres;

pub use broker::LocalBroker;
pub use native_billing::{Email, NativeBilling};
pub use postgres::{Durability, TempPostgres};
