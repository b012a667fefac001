//! The runner step of the transactional inbox: one PostgreSQL transaction per
//! message holding the inbox row and the handler's effects.
//!
//! Architecture invariant: this module knows nothing about Kafka or WebAssembly.
//! A message arrives as plain data ([`Message`]); the handler is a trait
//! ([`Handler`]) that the plugin runtime implements.

mod claim;
mod dead_letters;
mod handler;
mod live;
mod message;
mod outbox;
mod outcome;
mod partitions;
mod requests;
mod retention;
mod rights;
mod runner;
mod runner_settings;
mod schema;
mod session;
mod store;
mod strategy;

pub use claim::{DEFAULT_RESEND_WINDOW_SECS, MAX_RESEND_WINDOW_SECS};
pub use dead_letters::{
    claim_for_redrive, dead_letter, letter_ids, list_letters, show_letter, DeadLetter, LetterError,
    LetterFilter, LetterSummary, RedriveClaim, StoredLetter,
};
pub use handler::{storable_text, AfterCommit, Handler, HandlerError, Tx, MAX_FAILURE_TEXT};
pub use live::{live_fates, LiveFate};
pub use message::{Header, Message};
pub use outbox::{
    backlog as outbox_backlog, delete_sent, derived_id, outgoing_message_id,
    pending as pending_outgoing, try_lock_relay, OutboxRow, Outgoing, CAUSED_BY_HEADER,
    OUTBOX_CHANNEL, RELAY_ROUND_BYTES, RELAY_ROUND_ROWS, RESERVED_HEADERS,
    RESERVED_HEADER_PREFIXES,
};
pub use outcome::{FailureKind, Outcome};
pub use partitions::{prepare as prepare_partitions, PREPARED_AHEAD, PREPARED_BEHIND};
pub use requests::{
    backlog as request_backlog, call_key, finish as finish_request, finish_all as finish_requests,
    idempotency_key, next_due_in, reply_message_id, retry_later as retry_request_later,
    set_aside as set_request_aside, take_due as take_due_requests, OutgoingRequest, Reply,
    StoredRequest,
};
pub use retention::{prune, prune_attempts, prune_dead_letters, Pruned, ATTEMPTS_KEPT};
pub use rights::{check_rights, RUNTIME_RIGHTS};
pub use runner::Runner;
pub use runner_settings::{
    RunnerSettings, DEFAULT_LOCK_TIMEOUT_MS, DEFAULT_STATEMENT_TIMEOUT_MS,
    DEFAULT_TRANSACTION_TIMEOUT_MS,
};
pub use schema::{apply_example_tables, migrate};
pub use session::{ensure_guest_role, pool_options, DEFAULT_GUEST_ROLE};
pub use store::{forget_attempts, lost_connection, record_failure, retryable_sqlstate};
pub use strategy::{CommitOn, Strategy};
