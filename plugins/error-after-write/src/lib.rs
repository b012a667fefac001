//! Writes the invoice, then fails retryably: the host must roll the write back.
use inbox_guest::{Db, Event, HandlerError};

inbox_guest::handler!(handle);

fn handle(event: &Event, db: &Db) -> Result<(), HandlerError> {
    invoice::insert(event, db, invoice::V1_MARKER)?;
    Err(HandlerError::retryable("simulated failure after write"))
}
