use std::fmt;

use crate::wit::inbox::host::requests as wit;
use crate::wit::inbox::host::types::Header as WitHeader;
use crate::HandlerError;

/// An HTTP request to send once the message's transaction commits, with
/// [`send_after_commit`], or now, with [`call`](crate::call): a method, a URL
/// the host allows (`--http-allow`), headers and a body.
///
/// ```no_run
/// # fn f() -> Result<(), inbox_guest::HandlerError> {
/// use inbox_guest::{send_after_commit, Request};
/// let key = send_after_commit(
///     Request::post("https://mail.example.com/send")
///         .json(&serde_json::json!({"to": "a@example.com"}))?
///         .ordering_key("customer-7"),
/// )?;
/// # let _ = key; Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub(crate) method: String,
    pub(crate) url: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    pub(crate) ordering_key: Option<String>,
    pub(crate) reply_topic: Option<String>,
}

impl Request {
    /// A request with `method` (`GET`, `HEAD`, `POST`, `PUT`, `PATCH`, `DELETE`) to `url`.
    pub fn new(method: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            method: method.into(),
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            ordering_key: None,
            reply_topic: None,
        }
    }

    /// A `POST` to `url`.
    pub fn post(url: impl Into<String>) -> Self {
        Self::new("POST", url)
    }

    /// The body, as JSON, with `content-type: application/json`.
    pub fn json<T: serde::Serialize + ?Sized>(self, value: &T) -> Result<Self, HandlerError> {
        let body = serde_json::to_vec(value)
            .map_err(|e| HandlerError::fatal(format!("the request body cannot be JSON: {e}")))?;
        Ok(self.header("content-type", "application/json").body(body))
    }

    /// The body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Adds a header (`idempotency-key`, `host`, `content-length` and the other
    /// connection headers are the host's and refused).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Requests with the same ordering key are sent one after another, in the
    /// order written.
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// Publishes the response to `topic` (allowed by `--publish-topic`).
    pub fn reply_topic(mut self, topic: impl Into<String>) -> Self {
        self.reply_topic = Some(topic.into());
        self
    }
}

/// Asks for `request` to be sent when the message's transaction commits (and
/// never if it rolls back). Returns the `Idempotency-Key` it will carry: derived
/// from the group, the incoming message and the position of this call, the same
/// on every run of the message and every resend, so a receiver that honours the
/// key applies it once. A refused request ([`RequestError`]) fails the run for
/// good, whatever the handler returns.
pub fn send_after_commit(request: Request) -> Result<String, RequestError> {
    let headers: Vec<WitHeader> = request
        .headers
        .into_iter()
        .map(|(key, value)| WitHeader {
            key,
            value: Some(value.into_bytes()),
        })
        .collect();
    wit::send_after_commit(&wit::Request {
        method: request.method,
        url: request.url,
        headers,
        body: request.body,
        ordering_key: request.ordering_key,
        reply_topic: request.reply_topic,
    })
    .map_err(|e| RequestError {
        code: e.code,
        message: e.message,
    })
}

/// A request the host refused (docs/wit.md lists the codes); it says what
/// would allow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError {
    /// `IH020` (URL, method or reply topic not allowed), `IH021` (too many),
    /// `IH022` (too large) or `IH023` (a reserved or unstorable header).
    pub code: String,
    /// What was refused and what allows it.
    pub message: String,
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code, self.message)
    }
}

impl std::error::Error for RequestError {}

/// Never retryable: the host refuses the same request again.
impl From<RequestError> for HandlerError {
    fn from(err: RequestError) -> Self {
        HandlerError::fatal(err.to_string())
    }
}
