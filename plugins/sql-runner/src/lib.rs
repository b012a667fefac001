//! Executes the whole payload as one SQL statement without parameters.
//! A failed statement is a non-retryable error carrying its code and message.
use inbox_guest::{Db, Event, HandlerError};

inbox_guest::handler!(handle);

fn handle(event: &Event, db: &Db) -> Result<(), HandlerError> {
    db.execute(event.payload_str()?, &[])
        .map_err(|e| HandlerError::fatal(e.to_string()))?;
    Ok(())
}
