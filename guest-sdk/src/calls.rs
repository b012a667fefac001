//! Calls in the handler: an HTTP request sent while the message's transaction
//! is open, whose answer the handler can record in that transaction. It goes
//! out through the standard `wasi:http/outgoing-handler`, which the host sends
//! through its gate (`--http-allow`) with an `Idempotency-Key` it derives.

use std::fmt;

use wasip2::http::outgoing_handler;
use wasip2::http::types::{ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, Scheme};
use wasip2::io::streams::StreamError;

use crate::{HandlerError, Request};

/// Bytes written to or read from a body per host call.
const CHUNK: usize = 4096;

/// What came back from [`call`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The HTTP status (`200`, `402`, …): any status is an answer, not an error.
    pub status: u16,
    /// The response's headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body (at most `--http-max-response-bytes`; a longer one is an error).
    pub body: Vec<u8>,
}

impl Response {
    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body parsed as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, HandlerError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            HandlerError::fatal(format!(
                "the answer (status {}) is not the JSON expected: {e}",
                self.status
            ))
        })
    }
}

/// Sends `request` now and waits for its answer; the transaction stays open
/// meanwhile, and the wait counts against the guest's deadline
/// (`--guest-deadline-ms`).
///
/// The host adds an `Idempotency-Key` derived from the group, the incoming
/// message and the position of this call in the run: a run that rolls back and
/// runs again repeats the same keys in the same order, so a receiver that
/// honours the key applies the call once and answers the repeat as the first
/// time. A call the host refuses (a URL not allowed, too many, too large, a
/// reserved header) fails the run for good whatever the handler returns; an
/// unanswered one is a retryable [`CallError`].
///
/// ```no_run
/// # fn f() -> Result<(), inbox_guest::HandlerError> {
/// use inbox_guest::{call, Request};
/// let charge = call(
///     Request::post("https://pay.example.com/charges")
///         .json(&serde_json::json!({"order": "o-1", "cents": 1250}))?,
/// )?;
/// # let _ = charge; Ok(()) }
/// ```
pub fn call(request: Request) -> Result<Response, CallError> {
    if request.ordering_key.is_some() || request.reply_topic.is_some() {
        return Err(CallError::new(
            "an ordering key and a reply topic belong to send_after_commit; a call is answered \
             here, in order",
        ));
    }
    let (scheme, authority, path) = split_url(&request.url)?;
    let headers: Vec<(String, Vec<u8>)> = request
        .headers
        .into_iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), value.into_bytes()))
        .collect();
    let fields = Fields::from_list(&headers).map_err(|e| {
        CallError::new(format!(
            "a header is refused ({e:?}): idempotency-key, host and the connection's headers \
             are the host's"
        ))
    })?;
    let outgoing = OutgoingRequest::new(fields);
    let method = method(&request.method);
    let parts = [
        outgoing.set_method(&method),
        outgoing.set_scheme(Some(&scheme)),
        outgoing.set_authority(Some(authority)),
        outgoing.set_path_with_query(Some(path)),
    ];
    if parts.iter().any(Result::is_err) {
        return Err(CallError::new(format!(
            "{} {} is not a request wasi:http can make",
            request.method, request.url
        )));
    }
    let body = outgoing.body().expect("the body is taken once");
    let pending = outgoing_handler::handle(outgoing, None).map_err(CallError::from)?;
    write_body(&body, &request.body)?;
    OutgoingBody::finish(body, None).map_err(CallError::from)?;
    pending.subscribe().block();
    let answer = pending
        .get()
        .expect("ready after the block")
        .expect("read once")
        .map_err(CallError::from)?;
    let headers = answer
        .headers()
        .entries()
        .into_iter()
        .map(|(name, value)| (name, String::from_utf8_lossy(&value).into_owned()))
        .collect();
    let status = answer.status();
    let incoming = answer.consume().expect("the body is taken once");
    let mut body = Vec::new();
    {
        let stream = incoming.stream().expect("the stream is taken once");
        loop {
            match stream.blocking_read(CHUNK as u64) {
                Ok(chunk) => body.extend_from_slice(&chunk),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(CallError::new(format!(
                        "the answer's body broke off: {}",
                        e.to_debug_string()
                    )))
                }
            }
        }
    }
    drop(incoming);
    Ok(Response {
        status,
        headers,
        body,
    })
}

fn write_body(body: &OutgoingBody, bytes: &[u8]) -> Result<(), CallError> {
    let stream = body.write().expect("the stream is taken once");
    for chunk in bytes.chunks(CHUNK) {
        stream
            .blocking_write_and_flush(chunk)
            .map_err(|e| match e {
                StreamError::LastOperationFailed(e) => CallError::new(format!(
                    "the body could not be sent: {}",
                    e.to_debug_string()
                )),
                StreamError::Closed => CallError::new("the body could not be sent: the call ended"),
            })?;
    }
    Ok(())
}

fn method(name: &str) -> Method {
    match name.to_ascii_uppercase().as_str() {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "PATCH" => Method::Patch,
        "DELETE" => Method::Delete,
        other => Method::Other(other.to_string()),
    }
}

/// `https://host:port/path?query` as its scheme, authority and path.
fn split_url(url: &str) -> Result<(Scheme, &str, &str), CallError> {
    let bad = || CallError::new(format!("{url:?} is not an http:// or https:// URL"));
    let (scheme, rest) = url.split_once("://").ok_or_else(bad)?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "https" => Scheme::Https,
        "http" => Scheme::Http,
        _ => return Err(bad()),
    };
    let at = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(at);
    let path = path.split('#').next().unwrap_or_default();
    if authority.is_empty() {
        return Err(bad());
    }
    Ok((scheme, authority, if path.is_empty() { "/" } else { path }))
}

/// A call that got no answer: refused by the host, cut off, or unanswered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallError {
    /// What went wrong, in wasi:http's terms where it came from the host.
    pub message: String,
    /// Whether the same call may be answered on another run: not for a call
    /// refused (by the host's rules or as written), yes for one unanswered.
    pub retryable: bool,
}

impl CallError {
    /// A call that cannot be made as written: running again does not help.
    fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: false,
        }
    }
}

impl From<ErrorCode> for CallError {
    fn from(code: ErrorCode) -> Self {
        let (message, retryable) = match code {
            ErrorCode::HttpRequestDenied => (
                "the host refused the call (its log and the record's failure say which rule)"
                    .to_string(),
                false,
            ),
            ErrorCode::HttpResponseBodySize(_) => (
                "the answer is longer than the host reads (--http-max-response-bytes)".to_string(),
                false,
            ),
            other => (format!("no answer: {other:?}"), true),
        };
        Self { message, retryable }
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "call failed: {}", self.message)
    }
}

impl std::error::Error for CallError {}

/// Retryable when the call went unanswered; a refused one fails the record
/// for good (where the host refused it, whatever the handler returns).
impl From<CallError> for HandlerError {
    fn from(err: CallError) -> Self {
        if err.retryable {
            HandlerError::retryable(err.to_string())
        } else {
            HandlerError::fatal(err.to_string())
        }
    }
}
