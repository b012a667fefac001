//! The WebAssembly side: loading handler components, the sandbox they run in, and
//! the `db` and `outbox` capabilities bound to the inbox transaction, and the
//! requests and calls it may make through the host's gate.
//!
//! Architecture invariant: this module knows nothing about Kafka. It implements
//! [`crate::inbox::Handler`] for a loaded plugin; the runner decides when to commit.

mod bindings;
mod calls;
mod clock;
mod db_session;
mod db_values;
mod event;
mod handed_over;
mod handle;
mod legacy;
mod limits;
mod loader;
mod outbox;
mod output;
mod requests;
mod runtime;
mod sql_checks;
mod sql_guard;
mod state;
mod swap;

pub use limits::{
    PublishLimits, RequestLimits, SandboxLimits, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_PUBLISH,
    DEFAULT_MAX_PUBLISH_BYTES, DEFAULT_MAX_REQUESTS, DEFAULT_MAX_REQUEST_BYTES,
};
pub use loader::{digest_of, LoadError, Plugin, CONTRACT, CONTRACTS};
pub use requests::CALL_NOT_SENT;
pub use runtime::Runtime;
pub use sql_guard::{check as check_statement, Violation};
pub use swap::{PluginCell, SwapCounts, Watcher};
