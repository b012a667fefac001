//! Requests after commit: writes an invoice per order and asks for a
//! notification (`POST` of the order to its `notify_url`) to be sent once the
//! transaction commits; the invoice keeps the request's `Idempotency-Key` in
//! its `marker` column. Requests of one customer go in order (the ordering key).
//!
//! Test knobs in the order: `"customer": "<c>"` orders by c (default: the order
//! id); `"reply_topic": "<t>"` publishes the response there; `"copies": n` asks
//! for n notifications; `"fail_after_request": true` returns a retryable error
//! after asking, `"trap_after_request": true` traps there (either way nothing
//! is sent); `"headers": [[name, value]]` adds headers.
use inbox_guest::{send_after_commit, Db, Event, HandlerError, Request};
use serde::Deserialize;

#[derive(Deserialize)]
struct Order {
    order_id: String,
    amount: f64,
    notify_url: String,
    customer: Option<String>,
    reply_topic: Option<String>,
    copies: Option<usize>,
    #[serde(default)]
    fail_after_request: bool,
    #[serde(default)]
    trap_after_request: bool,
    #[serde(default)]
    headers: Vec<(String, String)>,
}

inbox_guest::handler!(handle);

fn handle(event: &Event, db: &Db) -> Result<(), HandlerError> {
    let order: Order = event.json()?;
    let mut key = String::new();
    for _ in 0..order.copies.unwrap_or(1) {
        let mut request = Request::post(order.notify_url.as_str())
            .json(&serde_json::json!({ "order_id": order.order_id, "amount": order.amount }))?
            .ordering_key(order.customer.as_deref().unwrap_or(&order.order_id));
        if let Some(topic) = &order.reply_topic {
            request = request.reply_topic(topic.as_str());
        }
        for (name, value) in &order.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        key = send_after_commit(request)?;
    }
    db.execute(
        "INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ($1, $2, $3, $4)",
        &[
            order.order_id.as_str().into(),
            order.amount.into(),
            event.message_id.as_str().into(),
            key.as_str().into(),
        ],
    )?;
    if order.trap_after_request {
        panic!("trapping after asking for the notification");
    }
    if order.fail_after_request {
        return Err(HandlerError::retryable(
            "failing after asking for the notification",
        ));
    }
    Ok(())
}
