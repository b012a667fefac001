//! A real HTTP receiver for calls beyond the database, on a loopback port:
//! it honours `Idempotency-Key` as Stripe-like APIs do (a key applied once
//! answers the same again without applying it twice: the same `charge_id`,
//! with `"repeat": true`), answers each path as the test scripted it, and
//! keeps every arrival for the test to assert on.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub method: String,
    pub path: String,
    pub key: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub at: Instant,
    /// The status it was answered with.
    pub status: u16,
}

/// A scripted answer: a status and its headers.
type Answer = (u16, Vec<(String, String)>);

#[derive(Default)]
struct State {
    arrivals: Vec<Arrival>,
    /// Answers to give on a path before the default 200, in order.
    scripts: HashMap<String, VecDeque<Answer>>,
    /// Keys applied, with the body that applied them and the charge id given.
    applied: HashMap<String, (Vec<u8>, String)>,
    /// Answers every request to a path with this status, always.
    always: HashMap<String, u16>,
    /// Holds the answer to the next request to a path this long (after
    /// applying it), once.
    hold: HashMap<String, std::time::Duration>,
}

/// Listens until dropped.
pub struct Receiver {
    /// `http://127.0.0.1:<port>`.
    pub origin: String,
    pub port: u16,
    state: Arc<Mutex<State>>,
    server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let port = listener.local_addr().expect("address").port();
        let state = Arc::new(Mutex::new(State::default()));
        let kept = state.clone();
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let kept = kept.clone();
                async move {
                    let (response, hold) = receive(&kept, method, uri, headers, body);
                    if let Some(hold) = hold {
                        tokio::time::sleep(hold).await;
                    }
                    response
                }
            },
        );
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("receiver");
        });
        Self {
            origin: format!("http://127.0.0.1:{port}"),
            port,
            state,
            server,
        }
    }

    /// The next requests to `path` get these statuses (with headers), in order.
    pub fn script(&self, path: &str, answers: &[(u16, &[(&str, &str)])]) {
        let mut state = self.lock();
        let queue = state.scripts.entry(path.to_string()).or_default();
        for (status, headers) in answers {
            let headers = headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
            queue.push_back((*status, headers));
        }
    }

    /// The next request to `path` is applied, then answered only after `hold`.
    pub fn hold(&self, path: &str, hold: std::time::Duration) {
        self.lock().hold.insert(path.to_string(), hold);
    }

    /// Every request to `path` gets `status`.
    pub fn always(&self, path: &str, status: u16) {
        self.lock().always.insert(path.to_string(), status);
    }

    /// An order record (`order_id`, `amount` 10) whose `url_field` names `path`
    /// here, with more knobs merged in.
    pub fn order(
        &self,
        stage: &crate::stage::Stage,
        url_field: &str,
        id: &str,
        path: &str,
        knobs: serde_json::Value,
    ) -> inbox_host::kafka::OutgoingRecord {
        let mut payload = serde_json::json!({ "order_id": id, "amount": 10 });
        payload[url_field] = format!("{}{path}", self.origin).into();
        if let (Some(payload), Some(knobs)) = (payload.as_object_mut(), knobs.as_object()) {
            payload.extend(knobs.clone());
        }
        stage.record(id, Some(0), payload.to_string())
    }

    pub fn arrivals(&self) -> Vec<Arrival> {
        self.lock().arrivals.clone()
    }

    /// Effects applied: one per distinct key answered with a 2xx.
    pub fn applied(&self) -> usize {
        self.lock().applied.len()
    }

    /// The keys applied, each with the charge id it was given.
    pub fn applied_keys(&self) -> HashMap<String, String> {
        let state = self.lock();
        let applied = state.applied.iter();
        applied
            .map(|(key, (_, id))| (key.clone(), id.clone()))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn receive(
    state: &Mutex<State>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> (Response, Option<std::time::Duration>) {
    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
    let path = uri.path().to_string();
    let hold = state.hold.remove(&path);
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let (status, extra) = match state.always.get(&path) {
        Some(status) => (*status, Vec::new()),
        None => state
            .scripts
            .get_mut(&path)
            .and_then(VecDeque::pop_front)
            .unwrap_or((200, Vec::new())),
    };
    let mut charge = None;
    if (200..300).contains(&status) {
        if let Some(key) = &key {
            let next = format!("ch-{}", state.applied.len() + 1);
            let repeat = state.applied.contains_key(key);
            let (_, id) = state
                .applied
                .entry(key.clone())
                .or_insert_with(|| (body.to_vec(), next));
            charge = Some((id.clone(), repeat));
        }
    }
    state.arrivals.push(Arrival {
        method: method.to_string(),
        path,
        key,
        headers: headers
            .iter()
            .map(|(n, v)| {
                (
                    n.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.to_vec(),
        at: Instant::now(),
        status,
    });
    let mut response = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [("content-type", "application/json")],
        match charge {
            Some((id, repeat)) => {
                format!("{{\"status\": {status}, \"charge_id\": \"{id}\", \"repeat\": {repeat}}}")
            }
            None => format!("{{\"status\": {status}}}"),
        },
    )
        .into_response();
    for (name, value) in extra {
        if let (Ok(n), Ok(v)) = (
            axum::http::HeaderName::from_bytes(name.as_bytes()),
            axum::http::HeaderValue::from_str(&value),
        ) {
            response.headers_mut().insert(n, v);
        }
    }
    (response, hold)
}
