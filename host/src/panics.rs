//! What a caught panic said, for the reason a record is set aside or fails with.

use std::any::Any;

/// The panic's message (`panic!("...")` carries a `&str` or a `String`).
pub fn text(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}
