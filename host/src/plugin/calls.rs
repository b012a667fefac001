//! Calls in the handler: the guest's `wasi:http/outgoing-handler` requests,
//! sent while its transaction is open, through the same gate as requests after
//! commit (`crate::egress`) and under the same rules (`requests.rs`), with an
//! `Idempotency-Key` derived from the record and the call's position in the
//! run, so the redelivery of a rolled-back run repeats the same keys.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use wasmtime_wasi_http::{
    Error, ForbiddenHeaderFilter, RequestOptions, WasiBody, WasiHttpHooks,
    DEFAULT_FORBIDDEN_HEADERS,
};

use super::bindings::inbox::host::requests::RequestError;
use super::handed_over::{check_header, Refusals};
use super::limits::RequestLimits;
use super::requests::{
    check_count, check_method, check_size, Refusal, BAD_HEADER, CALL_NOT_SENT, NOT_ALLOWED,
    RESERVED, RESERVED_PREFIXES, TOO_LARGE,
};
use crate::egress::{origin_of, Call, Failure, Purpose};
use crate::inbox::call_key;

/// One message's calls: what the hook needs to send them, and what it refused.
pub(crate) struct HandlerCalls {
    limits: Arc<RequestLimits>,
    incoming_id: Arc<str>,
    made: usize,
    log: Arc<Mutex<CallLog>>,
}

/// What the calls' tasks report back to the run (they outlive the hook's borrow).
#[derive(Default)]
pub(crate) struct CallLog {
    /// The first refused call: the run fails whatever the guest made of it.
    pub refused: Option<RequestError>,
    pub refusals: Refusals,
}

impl HandlerCalls {
    pub fn new(limits: RequestLimits) -> Self {
        Self {
            limits: Arc::new(limits),
            incoming_id: Arc::from(""),
            made: 0,
            log: Arc::default(),
        }
    }

    /// Starts `message_id`'s run: its calls count from 0 again.
    pub fn next_message(&mut self, message_id: &str) {
        self.incoming_id = Arc::from(message_id);
        self.made = 0;
        let mut log = self.lock();
        log.refused = None;
        log.refusals.reset();
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, CallLog> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

type Sent = Box<
    dyn std::future::Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn std::future::Future<Output = Result<(), Error>> + Send>,
                ),
                Error,
            >,
        > + Send,
>;

impl WasiHttpHooks for HandlerCalls {
    /// The connection's headers (wasmtime's list) and the ones the host sets
    /// (`Idempotency-Key`): setting one is an error where the guest sets it.
    fn forbidden_header_filter(&mut self) -> ForbiddenHeaderFilter {
        // `content-length` may be written (fetch() does): wasi:http holds the
        // body to it, and the gate sends the length of what was written.
        Arc::new(|name| {
            *name != http::header::CONTENT_LENGTH
                && (DEFAULT_FORBIDDEN_HEADERS.contains(name)
                    || check_header(name.as_str(), None, RESERVED, RESERVED_PREFIXES).is_err())
        })
    }

    /// The gate names the host from the URL.
    fn set_host_header(&mut self) -> bool {
        false
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _response_done: Box<dyn std::future::Future<Output = Result<(), Error>> + Send>,
    ) -> Sent {
        let position = self.made;
        self.made += 1;
        let (limits, log) = (self.limits.clone(), self.log.clone());
        let key = call_key(&limits.group, &self.incoming_id, position);
        Box::new(async move {
            let refuse = |code: &str, message: String| {
                let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                log.refusals.note("call", code, &message);
                log.refused.get_or_insert(RequestError {
                    code: code.into(),
                    message,
                });
                Error::HttpRequestDenied
            };
            let answer = send(&limits, position, &key, request)
                .await
                .map_err(|refused| match refused {
                    Refused::Rule(code, why) => refuse(code, why),
                    Refused::Other(error) => error,
                })?;
            let done: Box<dyn std::future::Future<Output = Result<(), Error>> + Send> =
                Box::new(async { Ok(()) });
            Ok((answer, done))
        })
    }
}

/// Why a call got no answer: a rule (the run fails), or what the guest sees.
enum Refused {
    Rule(&'static str, String),
    Other(Error),
}

async fn send(
    limits: &RequestLimits,
    position: usize,
    key: &str,
    request: http::Request<WasiBody>,
) -> Result<http::Response<WasiBody>, Refused> {
    let rule = |(code, why): Refusal| Refused::Rule(code, why);
    check_count(position, limits.max_requests, "make", "calls").map_err(rule)?;
    let (parts, body) = request.into_parts();
    // Sent as the guest spelled it: only the names the host sends pass.
    let method = parts.method.as_str();
    check_method(method, method).map_err(rule)?;
    let url = parts.uri.to_string();
    let Some(gate) = &limits.gate else {
        return Err(Refused::Rule(
            CALL_NOT_SENT,
            format!(
                "calls are not sent in this run (a shadow run or a check sends nothing): {method} {}",
                origin_of(&url)
            ),
        ));
    };
    gate.check_url(&url)
        .map_err(|why| Refused::Rule(NOT_ALLOWED, why))?;
    let mut headers = Vec::with_capacity(parts.headers.len());
    let mut bytes = url.len();
    for (name, value) in &parts.headers {
        if name == http::header::CONTENT_LENGTH {
            continue;
        }
        check_header(
            name.as_str(),
            Some(value.as_bytes()),
            RESERVED,
            RESERVED_PREFIXES,
        )
        .map_err(|why| Refused::Rule(BAD_HEADER, why))?;
        let value = value.to_str().expect("checked as UTF-8 above");
        bytes += name.as_str().len() + value.len();
        headers.push((name.as_str(), value));
    }
    let max = limits.max_request_bytes;
    // Read no further than the bound: a body past it is refused as over it.
    let body = Limited::new(body, max.saturating_sub(bytes))
        .collect()
        .await
        .map_err(|e| match e.downcast::<Error>() {
            Ok(error) => Refused::Other(*error),
            Err(_) => Refused::Rule(
                TOO_LARGE,
                format!("a call of more than {max} bytes (URL, headers, body) is over --http-max-request-bytes ({max})"),
            ),
        })?
        .to_bytes();
    check_size(bytes + body.len(), max, "call").map_err(rule)?;
    let call = Call {
        method,
        url: &url,
        headers,
        body: &body,
        idempotency_key: key,
        purpose: Purpose::Call,
    };
    let answer = match gate.send(&call).await {
        Ok(answer) => answer,
        Err(Failure::Refused(why)) => return Err(Refused::Rule(NOT_ALLOWED, why)),
        Err(Failure::NoAnswer(why)) => {
            tracing::info!(key, error = %why, "call in the handler: no answer");
            return Err(Refused::Other(if why.contains("timed out") {
                Error::ConnectionTimeout
            } else {
                Error::DestinationUnavailable
            }));
        }
    };
    if answer.truncated {
        return Err(Refused::Other(Error::HttpResponseBodySize(None)));
    }
    let mut response = http::Response::builder().status(answer.status);
    for (name, value) in &answer.headers {
        response = response.header(name, value);
    }
    let body = Full::new(Bytes::from(answer.body))
        .map_err(|never| match never {})
        .boxed_unsync();
    response
        .body(body)
        .map_err(|e| Refused::Other(Error::InternalError(Some(e.to_string()))))
}
