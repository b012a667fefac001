//! Calls beyond the database: the one gate every outgoing HTTP request of a
//! guest passes (requests after commit, and calls in the handler through
//! `wasi:http`), with its rules in one place: the allow-list (`rules.rs`), the
//! address check and the resolver that enforces it (`addresses.rs`), the
//! secrets put in at send time (`secrets.rs`), the client (`client.rs`), the
//! retry schedule (`retry.rs`) and what it counts per origin (`stats.rs`). docs/effects.md says what they guarantee.
//!
//! Architecture invariant: this module knows nothing about Kafka, PostgreSQL or
//! WebAssembly; `plugin` asks it whether a guest may ask for a URL, `app` sends
//! through it.

mod addresses;
mod client;
mod retry;
mod rules;
mod secrets;
mod stats;

pub use addresses::refused as refused_address;
pub use client::{check_url, Answer, Call, Failure, Gate, GateSettings};
pub use retry::{is_success, next as next_attempt, retries, Attempt, Next, Schedule};
pub use rules::{AllowList, Rule};
pub use secrets::Secrets;
pub use stats::{origin_of, Backlog, Purpose, Stats};
