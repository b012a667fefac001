//! Recurses without bound: the host's wasm stack limit must trap it.
//!
//! Frames keep their state in wasm locals rather than in linear memory, so it is
//! the engine's call stack that overflows (`call stack exhausted`), not the
//! guest's shadow stack.
use std::hint::black_box;

use inbox_guest::{Db, Event, HandlerError};

inbox_guest::handler!(handle);

fn handle(_event: &Event, _db: &Db) -> Result<(), HandlerError> {
    black_box(dive(0));
    Ok(())
}

#[inline(never)]
fn dive(depth: u64) -> u64 {
    // Never taken; a reachable exit keeps `unconditional_recursion` quiet.
    if depth == u64::MAX {
        return 0;
    }
    let a = depth.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let b = a.rotate_left(17) ^ depth;
    // Two operations after the call, so it is no tail or accumulator recursion.
    (dive(depth + 1) ^ a).wrapping_add(b)
}
