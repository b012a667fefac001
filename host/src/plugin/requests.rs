//! What a guest asks to send through the WIT `requests` interface (bound on
//! `DbSession` in `db_session.rs`): checked against the gate's rules
//! (`crate::egress`) and the rules in `handed_over.rs` at the call, and kept
//! for the runner, which stores it in the inbox transaction when the handler
//! succeeds. The host sends it after the commit (app/requests/).

use super::bindings::inbox::host::requests::{Request, RequestError};
use super::handed_over::{check_header, Refusals};
use super::limits::RequestLimits;
use crate::inbox::{idempotency_key, Header, OutgoingRequest};

/// Codes of a refused request (docs/wit.md).
pub(super) const NOT_ALLOWED: &str = "IH020";
const TOO_MANY: &str = "IH021";
pub(super) const TOO_LARGE: &str = "IH022";
pub(super) const BAD_HEADER: &str = "IH023";
/// A call in the handler made where nothing is sent (a shadow run, a check):
/// the run cannot go on without the answer, so it fails, and a shadow reports
/// the record as not comparable rather than as a regression.
pub const CALL_NOT_SENT: &str = "IH024";

/// Methods a request after commit or a call in the handler may use.
const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];

/// Headers the host sets on every request, or that belong to the connection: a
/// guest may not set them in any spelling (nor `proxy-*`).
pub(super) const RESERVED: &[&str] = &[
    "idempotency-key",
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "expect",
];
pub(super) const RESERVED_PREFIXES: &[&str] = &["proxy-"];

/// A refusal by the rules both requests after commit and calls meet: its
/// code, and what is wrong and what allows it.
pub(super) type Refusal = (&'static str, String);

/// The `asked`th request or call (0, 1, …) of a run, under `--http-max-requests`.
pub(super) fn check_count(asked: usize, max: usize, verb: &str, what: &str) -> Result<(), Refusal> {
    if asked < max {
        return Ok(());
    }
    Err((
        TOO_MANY,
        format!("a record's run may {verb} at most {max} {what} (--http-max-requests)"),
    ))
}

/// The method as the host would send it, `sent`, one it sends; `given` is the
/// guest's own spelling, for the refusal.
pub(super) fn check_method(sent: &str, given: &str) -> Result<(), Refusal> {
    if METHODS.contains(&sent) {
        return Ok(());
    }
    Err((
        NOT_ALLOWED,
        format!(
            "method {given:?} is not sent (one of {})",
            METHODS.join(", ")
        ),
    ))
}

/// A request or call of `bytes` (URL, headers, body), under `--http-max-request-bytes`.
pub(super) fn check_size(bytes: usize, max: usize, what: &str) -> Result<(), Refusal> {
    if bytes <= max {
        return Ok(());
    }
    Err((
        TOO_LARGE,
        format!("a {what} of {bytes} bytes (URL, headers, body) is over --http-max-request-bytes ({max})"),
    ))
}

/// One message's requests.
pub(crate) struct RequestSession {
    limits: RequestLimits,
    /// The incoming message's id: with the group and the position, the key.
    incoming_id: String,
    requested: Vec<OutgoingRequest>,
    /// The first refused request: the run fails whatever the guest returns.
    pub refused: Option<RequestError>,
    pub refusals: Refusals,
}

impl RequestSession {
    pub fn new(limits: RequestLimits) -> Self {
        Self {
            limits,
            incoming_id: String::new(),
            requested: Vec::new(),
            refused: None,
            refusals: Refusals::default(),
        }
    }

    /// Starts `message_id`'s run, forgetting the previous message's requests.
    pub fn next_message(&mut self, message_id: &str) {
        message_id.clone_into(&mut self.incoming_id);
        self.requested.clear();
        self.refused = None;
        self.refusals.reset();
    }

    /// What the guest asked for, in order.
    pub fn take(&mut self) -> Vec<OutgoingRequest> {
        std::mem::take(&mut self.requested)
    }

    /// Keeps the request and returns its `Idempotency-Key`, or refuses it (the
    /// first refusal fails the run).
    pub fn request(&mut self, request: Request) -> Result<String, RequestError> {
        let kept = self.keep(request);
        if let Err(e) = &kept {
            self.refusals.note("request", &e.code, &e.message);
            self.refused.get_or_insert_with(|| e.clone());
        }
        kept
    }

    fn keep(&mut self, request: Request) -> Result<String, RequestError> {
        let refused = |code: &str, message: String| RequestError {
            code: code.to_string(),
            message,
        };
        let limits = &self.limits;
        let rule = |(code, message): Refusal| refused(code, message);
        check_count(
            self.requested.len(),
            limits.max_requests,
            "ask for",
            "requests",
        )
        .map_err(rule)?;
        let method = request.method.trim().to_ascii_uppercase();
        check_method(&method, &request.method).map_err(rule)?;
        crate::egress::check_url(&limits.allow, &request.url)
            .map_err(|why| refused(NOT_ALLOWED, why))?;
        if let Some(topic) = &request.reply_topic {
            if !limits.reply_topics.contains(topic) {
                return Err(refused(
                    NOT_ALLOWED,
                    format!(
                        "the reply topic {topic:?} is not allowed: start the host with \
                         --publish-topic {topic} to allow it"
                    ),
                ));
            }
        }
        if request
            .ordering_key
            .as_deref()
            .is_some_and(|k| k.contains('\0'))
        {
            return Err(refused(
                BAD_HEADER,
                "the ordering key holds a NUL character, which cannot be stored".into(),
            ));
        }
        for h in &request.headers {
            check_header(&h.key, h.value.as_deref(), RESERVED, RESERVED_PREFIXES)
                .map_err(|why| refused(BAD_HEADER, why))?;
        }
        let kept = OutgoingRequest {
            method,
            url: request.url,
            headers: request
                .headers
                .into_iter()
                .map(|h| Header {
                    key: h.key,
                    value: h.value,
                })
                .collect(),
            body: request.body,
            ordering_key: request.ordering_key,
            reply_topic: request.reply_topic,
        };
        check_size(kept.bytes(), limits.max_request_bytes, "request").map_err(rule)?;
        let key = idempotency_key(&limits.group, &self.incoming_id, self.requested.len());
        self.requested.push(kept);
        Ok(key)
    }
}
