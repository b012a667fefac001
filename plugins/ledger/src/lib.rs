//! The next step of the pipeline: one ledger row per `invoice-created` message
//! (published by billing-publish). The table has no unique key, so a message
//! handled twice would show as two rows.
use inbox_guest::{Db, Event, HandlerError};
use serde::Deserialize;

#[derive(Deserialize)]
struct InvoiceCreated {
    order_id: String,
    amount: f64,
}

inbox_guest::handler!(handle);

fn handle(event: &Event, db: &Db) -> Result<(), HandlerError> {
    let invoice: InvoiceCreated = event.json()?;
    db.execute(
        "INSERT INTO ledger (order_id, amount, message_id) VALUES ($1, $2, $3)",
        &[
            invoice.order_id.as_str().into(),
            invoice.amount.into(),
            event.message_id.as_str().into(),
        ],
    )?;
    Ok(())
}
