//! What one message's guest may use: the limits every part of the sandbox reads.

use std::sync::Arc;
use std::time::Duration;

use crate::egress::{AllowList, Gate};

/// Resolution of the per-message deadline (wall-clock time in wasm, not CPU time).
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// What one message's guest may use.
#[derive(Debug, Clone)]
pub struct SandboxLimits {
    /// The longest a guest may run wasm for one message (wall-clock, checked every
    /// 10 ms). Time waiting on `db` calls does not count: `statement_timeout`
    /// bounds those, since an epoch cannot interrupt a host await.
    pub deadline: Duration,
    /// The most linear memory a guest may have, in bytes: all memories of all
    /// its instances together.
    pub memory_bytes: usize,
    /// The most bytes of parameters one statement may send; a message's
    /// statements together may send 16 times this.
    pub max_param_bytes: usize,
    /// The most native stack wasm code may use, in bytes.
    pub max_stack_bytes: usize,
    /// Bytes of stdout and of stderr kept per message for the host log.
    pub output_bytes: usize,
    /// Keep a guest's instance for its next message instead of instantiating
    /// afresh (`--reuse-instance`, docs/plugins.md): its globals and heap carry
    /// over; an instance whose message failed in any way is discarded.
    pub reuse_instance: bool,
    /// What the guest may publish through `outbox`.
    pub publish: PublishLimits,
    /// What the guest may ask to send through `requests`.
    pub requests: RequestLimits,
}

/// What one message's guest may ask to send after commit and call in the
/// handler (`--http-allow`, `--http-max-requests`, `--http-max-request-bytes`).
#[derive(Debug, Clone)]
pub struct RequestLimits {
    /// The consumer group: a request's key is derived from it.
    pub group: String,
    /// What the guest may reach; nothing by default.
    pub allow: Arc<AllowList>,
    pub max_requests: usize,
    /// The most bytes of one request: URL, header names and values, body.
    pub max_request_bytes: usize,
    /// Topics a reply may go to (the `--publish-topic`s).
    pub reply_topics: Vec<String>,
    /// What calls in the handler go through; none where nothing may be sent
    /// (a shadow run, a check): such a call is refused.
    pub gate: Option<Arc<Gate>>,
}

/// The CLI's defaults for `--http-max-requests` and `--http-max-request-bytes`.
pub const DEFAULT_MAX_REQUESTS: usize = 16;
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 1 << 20;

impl Default for RequestLimits {
    fn default() -> Self {
        Self {
            group: String::new(),
            allow: Arc::default(),
            max_requests: DEFAULT_MAX_REQUESTS,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            reply_topics: Vec::new(),
            gate: None,
        }
    }
}

/// What one message's guest may publish (`--publish-topic`, `--max-publish`,
/// `--max-message-bytes`, `--max-publish-bytes`).
#[derive(Debug, Clone)]
pub struct PublishLimits {
    /// Topics the guest may publish to; none by default.
    pub topics: Vec<String>,
    /// The most messages one record's run may publish.
    pub max_messages: usize,
    /// The most bytes one message may have: key, value, header names and values.
    pub max_message_bytes: usize,
    /// The most bytes one record's publications may have together: what the
    /// host holds for a record until its transaction stores them.
    pub max_record_bytes: usize,
}

/// The CLI's defaults for `--max-publish` and `--max-message-bytes` (1 MiB,
/// about a default broker's `message.max.bytes`).
pub const DEFAULT_MAX_PUBLISH: usize = 100;
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1 << 20;

/// The CLI's default for `--max-publish-bytes`: eight default-sized messages
/// (docs/outbox.md says why).
pub const DEFAULT_MAX_PUBLISH_BYTES: usize = 8 << 20;

impl Default for PublishLimits {
    fn default() -> Self {
        Self {
            topics: Vec::new(),
            max_messages: DEFAULT_MAX_PUBLISH,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_record_bytes: DEFAULT_MAX_PUBLISH_BYTES,
        }
    }
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(5),
            memory_bytes: 64 << 20,
            max_param_bytes: 1 << 20,
            max_stack_bytes: 512 << 10,
            output_bytes: 256 << 10,
            reuse_instance: false,
            publish: PublishLimits::default(),
            requests: RequestLimits::default(),
        }
    }
}

/// The most elements a guest table may grow to.
pub(crate) const MAX_TABLE_ELEMENTS: usize = 100_000;
