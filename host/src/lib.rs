//! inbox-host: the transactional inbox for Kafka consumers on PostgreSQL, with
//! message handlers as sandboxed WebAssembly components.
//!
//! # Layout
//! - [`cli`]: the command line (clap derive; every flag also from the environment).
//! - [`app`]: the composition root, the only module that knows Kafka, the inbox and
//!   plugins together, in four rooms: wiring (`app::run`), the consume path
//!   (`app::consume`: a worker per assigned partition, and `decide`, the one place
//!   that says what happens to a record after its outcome), observability
//!   (`app::observe`) and operator commands (`app::commands`).
//!   docs/architecture.md walks one record through them.
//! - [`kafka`]: the group member: each assigned partition as an ordered stream of
//!   records, offsets stored after the database commit (librdkafka commits them).
//! - [`inbox`]: the runner: a batch of records in one transaction, inbox rows,
//!   handler per record, commit; the host's schema and the rights it needs.
//! - [`plugin`]: wasmtime, the sandbox, the `db`, `outbox` and `requests`
//!   capabilities, hot swap.
//! - [`egress`]: calls beyond the database: the allow-list, the address check,
//!   the HTTP client and the retry schedule, one gate for every guest request.
//! - [`panics`]: the message of a caught panic (every layer catches its own).
//! - [`telemetry`]: logs and OpenTelemetry traces, set up once by `main`.
//! - [`toolchain`]: `inbox-host build` and `new`: plugins from source, toolchains pinned.
//! - [`embedded`]: throwaway PostgreSQL and a local Kafka-protocol broker for the
//!   lab, the demo and the tests; never on the production path.
//!
//! # Architecture invariants
//! - `kafka` knows nothing about SQL or wasm; `inbox` knows nothing about Kafka or
//!   wasm; `plugin` knows nothing about Kafka. `plugin` depends on `inbox` only for
//!   the [`inbox::Handler`] trait it implements. `egress` knows nothing about
//!   Kafka, SQL or wasm; `plugin` and `app` ask it.
//! - Only the runner commits the database transaction, and the offset of a record
//!   is stored only after (or, for at-most-once, committed before) that one place;
//!   a partition's worker never stores an offset past a record that is not done.

pub mod app;
pub mod cli;
pub mod egress;
pub mod embedded;
pub mod inbox;
pub mod kafka;
pub mod panics;
pub mod plugin;
pub mod telemetry;
pub mod toolchain;
