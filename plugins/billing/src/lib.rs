//! Writes one invoice row per order message (see [`invoice::Order`]).
//!
//! `BILLING_MARKER=billing-v2 cargo build ...` builds a v2 that differs only in
//! the marker it writes.
use inbox_guest::{Db, Event, HandlerError};

// `Option::unwrap_or` is not const yet.
const MARKER: &str = match option_env!("BILLING_MARKER") {
    Some(marker) => marker,
    None => invoice::V1_MARKER,
};

inbox_guest::handler!(handle);

fn handle(event: &Event, db: &Db) -> Result<(), HandlerError> {
    invoice::insert(event, db, MARKER)?;
    Ok(())
}
