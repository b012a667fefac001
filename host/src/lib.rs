//! inbox-host: the transactional inbox for Kafka consumers on PostgreSQL, with
//! message handlers as sandboxed WebAssembly components.
//!
//! # Layout
//! - [`cli`]: the command line (clap derive; every flag also from the environment).
//! - [`app`]: the composition root, the only module that knows Kafka, the inbox and
//!   plugins together.
//! - [`kafka`]: the rdkafka consumer: messages in, offset commits out.
//! - [`inbox`]: the runner step: transaction, inbox row, handler, commit.
//! - [`plugin`]: wasmtime, the sandbox, the `db` capability, hot swap.
//! - [`embedded`]: throwaway PostgreSQL and a local Kafka-protocol broker for the
//!   lab, the demo and the tests; never on the production path.
//!
//! # Architecture invariants
//! - `kafka` knows nothing about SQL or wasm; `inbox` knows nothing about Kafka or
//!   wasm; `plugin` knows nothing about Kafka. `plugin` depends on `inbox` only for
//!   the [`inbox::Handler`] trait it implements.
//! - Only the runner commits the database transaction, and the offset of a message
//!   is committed only after (or, for at-most-once, before) that one place.

pub mod app;
pub mod cli;
pub mod embedded;
pub mod inbox;
pub mod kafka;
pub mod plugin;
pub mod telemetry;
