//! Counters of what happened to messages, and a small HTTP endpoint that serves
//! them (`/metrics`, Prometheus text) and the host's readiness with the active
//! plugin digest (`/health`: 503 naming the reason while PostgreSQL or Kafka
//! does not answer).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::Verdict;
use crate::inbox::{FailureKind, Outcome};
use crate::kafka::Reachability;
use crate::plugin::PluginCell;

/// Message counts by outcome and failures by kind, and whether the host can
/// do its work (the database and the brokers answering).
#[derive(Default)]
pub struct Metrics {
    counts: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    database_down: AtomicBool,
    kafka: OnceLock<Reachability>,
}

impl Metrics {
    /// Whether the database answers (set while waiting for it at start, and by
    /// each batch: a lost connection, or a commit).
    pub fn database_reachable(&self, reachable: bool) {
        self.database_down.store(!reachable, Ordering::SeqCst);
    }

    /// Follow the group member's view of the brokers.
    pub fn watch_kafka(&self, kafka: Reachability) {
        let _ = self.kafka.set(kafka);
    }

    /// Why the host is not ready; empty when it is.
    pub fn not_ready(&self) -> Vec<&'static str> {
        let mut reasons = Vec::new();
        if self.database_down.load(Ordering::SeqCst) {
            reasons.push("PostgreSQL unreachable");
        }
        if self.kafka.get().is_some_and(|k| !k.is_reachable()) {
            reasons.push("Kafka unreachable");
        }
        reasons
    }

    pub fn record(&self, verdict: &Verdict) {
        match verdict {
            Verdict::Handled(Outcome::Failed(e)) if e.kind == FailureKind::Database => {
                self.database_reachable(false)
            }
            Verdict::Handled(o) if o.committed() => self.database_reachable(true),
            _ => {}
        }
        let key = match verdict {
            Verdict::Handled(Outcome::Failed(e)) => ("failed", e.kind.as_str()),
            Verdict::Handled(outcome) => (outcome.label(), ""),
            Verdict::SetAside(_) => ("set_aside", ""),
        };
        *self
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_default() += 1;
    }

    /// Prometheus text exposition.
    pub fn render(&self, digest: &str) -> String {
        let mut out = String::from("# TYPE inbox_messages_total counter\n");
        for ((outcome, kind), n) in self.counts.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            if kind.is_empty() {
                out.push_str(&format!(
                    "inbox_messages_total{{outcome=\"{outcome}\"}} {n}\n"
                ));
            } else {
                out.push_str(&format!(
                    "inbox_messages_total{{outcome=\"{outcome}\",kind=\"{kind}\"}} {n}\n"
                ));
            }
        }
        out.push_str("# TYPE inbox_plugin_info gauge\n");
        out.push_str(&format!("inbox_plugin_info{{digest=\"{digest}\"}} 1\n"));
        out
    }
}

/// Serves `/metrics` and `/health` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, metrics: std::sync::Arc<Metrics>, cell: PluginCell) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let (metrics, cell) = (metrics.clone(), cell.clone());
        tokio::spawn(async move {
            let line = request_line(&mut stream).await;
            let digest = cell.current().digest().to_string();
            let (status, body) = if line.starts_with("GET /metrics") {
                ("200 OK", metrics.render(&digest))
            } else if line.starts_with("GET /health") {
                let reasons = metrics.not_ready();
                if reasons.is_empty() {
                    ("200 OK", format!("ok plugin={digest}\n"))
                } else {
                    (
                        "503 Service Unavailable",
                        format!("not ready: {} plugin={digest}\n", reasons.join(", ")),
                    )
                }
            } else {
                ("404 Not Found", "try /metrics or /health\n".to_string())
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        });
    }
}

/// Reads until the end of the request line (a client may send it in pieces), at
/// most 1 KiB.
async fn request_line(stream: &mut tokio::net::TcpStream) -> String {
    let mut request = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    while !request.windows(2).any(|w| w == b"\r\n") && request.len() < 1024 {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => request.extend_from_slice(&chunk[..n]),
        }
    }
    String::from_utf8_lossy(&request).into_owned()
}
