//! SDK for writing inbox-host handler plugins.
//!
//! A plugin is a `cdylib` crate built for `wasm32-wasip2`. It writes one function
//! that receives the Kafka message and a [`Db`] handle bound to the message's
//! PostgreSQL transaction, and registers it with [`handler!`]:
//!
//! ```no_run
//! use inbox_guest::{Db, Event, HandlerError};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct Order {
//!     order_id: String,
//!     amount: f64,
//! }
//!
//! inbox_guest::handler!(handle);
//!
//! fn handle(event: &Event, db: &Db) -> Result<(), HandlerError> {
//!     let order: Order = event.json()?;
//!     db.execute(
//!         "INSERT INTO invoices (order_id, amount, message_id) VALUES ($1, $2, $3)
//!          ON CONFLICT DO NOTHING",
//!         &[order.order_id.into(), order.amount.into(), event.message_id.as_str().into()],
//!     )?;
//!     Ok(())
//! }
//! ```
//!
//! A handler that is a step in a pipeline also publishes messages with
//! [`publish`]: they are stored in the same transaction and sent to Kafka after it
//! commits (docs/outbox.md), and asks for HTTP requests with
//! [`send_after_commit`]: stored in the same transaction and sent after it
//! commits, with an `Idempotency-Key` the host derives (docs/effects.md). A
//! handler that needs an answer before it writes (a charge, then its id
//! recorded) makes a [`call`]: sent now, through the host's gate, with a key
//! that a rolled-back run repeats.
//!
//! Returning `Ok(())` asks the host to commit the transaction; returning an error
//! or panicking rolls it back. [`HandlerError::is_retryable`] tells the host
//! whether delivering the message again can help.
#![deny(missing_docs)]

mod calls;
mod db;
mod error;
mod event;
mod outbox;
mod requests;

pub use calls::{call, CallError, Response};
pub use db::{Db, DbError, FromValue, Row, RowIndex, Rows, RowsIter, Value};
pub use error::HandlerError;
pub use event::{Event, Header};
pub use outbox::{publish, Outgoing, PublishError};
pub use requests::{send_after_commit, Request, RequestError};

#[doc(hidden)]
// Generated code: the flattened `handle` export takes one argument per field.
#[allow(clippy::too_many_arguments)]
pub mod wit {
    wit_bindgen::generate!({
        path: "../wit",
        world: "handler",
        pub_export_macro: true,
        default_bindings_module: "inbox_guest::wit",
        additional_derives: [PartialEq],
    });
}

/// Registers `fn(&Event, &Db) -> Result<(), HandlerError>` as the plugin's handler.
///
/// Use it once per plugin crate, at module level: `inbox_guest::handler!(handle);`.
/// It defines the component's `handle` export, which wraps the event, calls the
/// function and reports its error to the host.
#[macro_export]
macro_rules! handler {
    ($handler:path) => {
        #[doc(hidden)]
        pub struct __InboxGuestHandler;

        impl $crate::wit::Guest for __InboxGuestHandler {
            fn handle(
                event: $crate::wit::Event,
            ) -> ::core::result::Result<(), $crate::wit::HandlerError> {
                $crate::__private::run(event, $handler)
            }
        }

        $crate::wit::export!(__InboxGuestHandler with_types_in $crate::wit);
    };
}

#[doc(hidden)]
pub mod __private {
    use crate::{wit, Db, Event, HandlerError};

    pub fn run(
        event: wit::Event,
        handler: impl FnOnce(&Event, &Db) -> Result<(), HandlerError>,
    ) -> Result<(), wit::HandlerError> {
        handler(&Event::from(event), &Db::new()).map_err(|e| wit::HandlerError {
            retryable: e.is_retryable(),
            message: e.into_message(),
        })
    }
}
