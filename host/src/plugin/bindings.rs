//! The generated bindings of the `handler` world (`wit/inbox.wit`).

wasmtime::component::bindgen!({
    path: "../wit",
    world: "handler",
    imports: { default: async | trappable },
    exports: { default: async },
});

pub use inbox::host::db::{DbError, Rows, Value};
pub use inbox::host::types::HandlerError as GuestError;
