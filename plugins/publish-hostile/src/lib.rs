//! What a hostile (or careless) author publishes through the outbox. Each
//! record first writes an invoice (`order_id` = its message id), so a test sees
//! whether its run committed, then publishes to `invoices-created` as its JSON
//! payload says (an empty object publishes one small message):
//!
//! - `"headers": [[name, value], ...]`: headers of every message published;
//! - `"copies": n`, `"value_bytes": b`: n messages of b bytes each;
//! - `"ignore_refusals": true`: a refused publication is ignored and the run
//!   goes on (and returns ok);
//! - `"refused_statement_first": true`: first sends a statement the host
//!   refuses (`BEGIN`), ignores the refusal, then publishes and returns ok.
use inbox_guest::{publish, Db, Event, HandlerError, Outgoing};
use serde::Deserialize;

const TOPIC: &str = "invoices-created";

#[derive(Deserialize, Default)]
struct Knobs {
    #[serde(default)]
    headers: Vec<(String, String)>,
    copies: Option<usize>,
    value_bytes: Option<usize>,
    #[serde(default)]
    ignore_refusals: bool,
    #[serde(default)]
    refused_statement_first: bool,
}

inbox_guest::handler!(handle);

fn handle(event: &Event, db: &Db) -> Result<(), HandlerError> {
    let knobs: Knobs = event.json()?;
    db.execute(
        "INSERT INTO invoices (order_id, amount, message_id) VALUES ($1, 1, $1)",
        &[event.message_id.as_str().into()],
    )
    .map_err(|e| HandlerError::retryable(e.to_string()))?;
    if knobs.refused_statement_first {
        let refused = db.execute("BEGIN", &[]);
        debug_assert!(refused.is_err());
    }
    let value = vec![b'x'; knobs.value_bytes.unwrap_or(16)];
    for _ in 0..knobs.copies.unwrap_or(1) {
        let mut message = Outgoing::new(TOPIC, value.clone()).key(event.message_id.as_str());
        for (name, value) in &knobs.headers {
            message = message.header(name.as_str(), value.as_str());
        }
        match publish(message) {
            Ok(()) => {}
            Err(_) if knobs.ignore_refusals => {}
            Err(refused) => return Err(refused.into()),
        }
    }
    Ok(())
}
