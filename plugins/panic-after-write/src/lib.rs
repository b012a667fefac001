//! Writes the invoice, then panics: the host must roll the write back.
use inbox_guest::{Db, Event, HandlerError};

inbox_guest::handler!(handle);

fn handle(event: &Event, db: &Db) -> Result<(), HandlerError> {
    invoice::insert(event, db, invoice::V1_MARKER)?;
    panic!("simulated panic after write");
}
