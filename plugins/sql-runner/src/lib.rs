//! Runs the whole payload as one SQL statement without parameters: through
//! `db.query` when it starts with `query:`, else through `db.execute`.
//! A failed statement is a non-retryable error carrying its code and message.
use inbox_guest::{Db, Event, HandlerError};

inbox_guest::handler!(handle);

fn handle(event: &Event, db: &Db) -> Result<(), HandlerError> {
    let payload = event.payload_str()?;
    let result = match payload.strip_prefix("query:") {
        Some(sql) => db.query(sql, &[]).map(drop),
        None => db.execute(payload, &[]).map(drop),
    };
    result.map_err(|e| HandlerError::fatal(e.to_string()))
}
