use std::sync::atomic::{AtomicU64, Ordering};

use crate::inbox::{
    AfterCommit, FailureKind, Handler, HandlerError, Header, Message, Outgoing, OutgoingRequest, Tx,
};

/// The billing handler written natively in Rust: the same INSERT the billing
/// plugin does, through the same runner. The lab uses it (optionally failing
/// after the write) and the benchmark compares the plugin against it.
#[derive(Debug, Default)]
pub struct NativeBilling {
    /// Fail after writing the invoice (the lab's "handler that fails halfway").
    pub fail_after_write: bool,
    /// Also publish `invoice-created` to this topic, keyed by the order id (the
    /// lab's consume-transform-produce row, the benchmark's outbox mode).
    pub publish_to: Option<String>,
    /// Also email the order (the lab's email rows).
    pub email: Option<Email>,
    /// How many times the handler ran.
    pub runs: AtomicU64,
}

/// How the handler sends its email: a `POST` of the order to this URL.
#[derive(Debug, Clone)]
pub enum Email {
    /// A request after commit: sent once the transaction commits, with the
    /// host's `Idempotency-Key`.
    AfterCommit(String),
    /// The naive way: sent from the handler, without a key, before the
    /// transaction's outcome is known.
    Naive(String),
}

#[derive(serde::Deserialize)]
struct Order {
    order_id: serde_json::Value,
    amount: f64,
}

impl Handler for NativeBilling {
    fn version(&self) -> &str {
        "native:billing"
    }

    async fn handle(
        &self,
        message: &Message,
        mut tx: Tx,
    ) -> (Tx, Result<AfterCommit, HandlerError>) {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let order: Order = match serde_json::from_slice(&message.payload) {
            Ok(o) => o,
            Err(e) => {
                let error = HandlerError::new(
                    FailureKind::HandlerError,
                    false,
                    format!("payload is not an order: {e}"),
                );
                return (tx, Err(error));
            }
        };
        let order_id = match order.order_id {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        };
        let published: Vec<Outgoing> = self
            .publish_to
            .iter()
            .map(|topic| Outgoing {
                topic: topic.clone(),
                key: Some(order_id.clone().into_bytes()),
                value: serde_json::json!({ "order_id": order_id, "amount": order.amount })
                    .to_string()
                    .into_bytes(),
                headers: Vec::new(),
            })
            .collect();
        let body = serde_json::json!({ "order_id": order_id, "template": "invoice" }).to_string();
        let mut requests = Vec::new();
        match &self.email {
            None => {}
            Some(Email::AfterCommit(url)) => requests.push(OutgoingRequest {
                method: "POST".into(),
                url: url.clone(),
                headers: vec![Header {
                    key: "content-type".into(),
                    value: Some(b"application/json".to_vec()),
                }],
                body: body.into_bytes(),
                ordering_key: None,
                reply_topic: None,
            }),
            Some(Email::Naive(url)) => {
                let sent = reqwest::Client::new()
                    .post(url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                if let Err(e) = sent {
                    let error = HandlerError::new(FailureKind::HandlerError, true, e.to_string());
                    return (tx, Err(error));
                }
            }
        }
        let inserted = sqlx::query(
            // billing.wasm's statement, its four parameters bound the same way.
            "INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ($1, $2, $3, $4)",
        )
        .bind(order_id)
        .bind(order.amount)
        .bind(&message.message_id)
        .bind("native")
        .execute(&mut *tx)
        .await;
        let verdict = match inserted {
            Err(e) => Err(HandlerError::new(
                FailureKind::HandlerError,
                true,
                e.to_string(),
            )),
            Ok(_) if self.fail_after_write => Err(HandlerError::new(
                FailureKind::HandlerError,
                true,
                "the lab's handler fails after writing its invoice",
            )),
            Ok(_) => Ok(AfterCommit {
                messages: published,
                requests,
            }),
        };
        (tx, verdict)
    }
}
