//! Never returns: the host must interrupt it (fuel or epoch deadline).
use std::hint::black_box;

use inbox_guest::{Db, Event, HandlerError};

inbox_guest::handler!(handle);

fn handle(_event: &Event, _db: &Db) -> Result<(), HandlerError> {
    let mut n = 0u64;
    loop {
        n = black_box(n.wrapping_add(1));
    }
}
