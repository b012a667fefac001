//! Writes the invoice, runs a statement PostgreSQL rejects, ignores the error and
//! returns `Ok`: the host must still not commit the aborted transaction.
use inbox_guest::{Db, Event, HandlerError};

inbox_guest::handler!(handle);

fn handle(event: &Event, db: &Db) -> Result<(), HandlerError> {
    invoice::insert(event, db, invoice::V1_MARKER)?;
    // order_id is NOT NULL, so this fails with 23502.
    let _ = db.execute(
        "INSERT INTO invoices (order_id, amount, message_id, marker) VALUES (NULL, 0, $1, 'x')",
        &[event.message_id.as_str().into()],
    );
    Ok(())
}
