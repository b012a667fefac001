//! Writes the invoice and bumps `handler_calls.calls` for `call-counter`, so
//! tests can count how many handler runs were committed.
use inbox_guest::{Db, Event, HandlerError};

inbox_guest::handler!(handle);

fn handle(event: &Event, db: &Db) -> Result<(), HandlerError> {
    invoice::insert(event, db, invoice::V1_MARKER)?;
    db.execute(
        "UPDATE handler_calls SET calls = calls + 1 WHERE name = 'call-counter'",
        &[],
    )?;
    Ok(())
}
