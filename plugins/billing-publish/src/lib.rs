//! A step in a pipeline: writes one invoice per order (like billing) and
//! publishes `invoice-created` to `invoices-created`, keyed by the order id, in
//! the same transaction.
//!
//! Test knobs in the order: `"publish_to": "<topic>"` publishes there instead;
//! `"key": "<k>"` keys the message by k instead; `"copies": n` publishes n
//! messages; `"fail_after_publish": true` returns a retryable error after
//! writing and publishing, `"trap_after_publish": true` traps there (either way
//! everything rolls back).
use inbox_guest::{publish, Db, Event, HandlerError, Outgoing};
use serde::Deserialize;

/// The topic invoices are announced on.
const TOPIC: &str = "invoices-created";

#[derive(Deserialize, Default)]
struct Knobs {
    publish_to: Option<String>,
    key: Option<String>,
    copies: Option<u32>,
    #[serde(default)]
    fail_after_publish: bool,
    #[serde(default)]
    trap_after_publish: bool,
}

inbox_guest::handler!(handle);

fn handle(event: &Event, db: &Db) -> Result<(), HandlerError> {
    let order = invoice::insert(event, db, "billing-publish")?;
    let knobs: Knobs = event.json().unwrap_or_default();
    let topic = knobs.publish_to.as_deref().unwrap_or(TOPIC);
    let key = knobs.key.as_deref().unwrap_or(&order.order_id);
    let announced = serde_json::json!({
        "order_id": order.order_id,
        "amount": order.amount,
        "invoice_of": event.message_id,
    });
    for _ in 0..knobs.copies.unwrap_or(1) {
        publish(
            Outgoing::json(topic, &announced)?
                .key(key)
                .header("event-type", "invoice-created"),
        )?;
    }
    if knobs.trap_after_publish {
        panic!("trapping after writing the invoice and publishing invoice-created");
    }
    if knobs.fail_after_publish {
        return Err(HandlerError::retryable(
            "failing after writing the invoice and publishing invoice-created",
        ));
    }
    Ok(())
}
