//! Allocates 1 MiB after 1 MiB and keeps it all: the host's memory limit must stop it.
use std::hint::black_box;

use inbox_guest::{Db, Event, HandlerError};

inbox_guest::handler!(handle);

fn handle(_event: &Event, _db: &Db) -> Result<(), HandlerError> {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        hoard.push(vec![0xA5; 1 << 20]);
        // Keeps the optimizer from eliding allocations nobody reads.
        black_box(&hoard);
    }
}
