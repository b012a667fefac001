//! The `event` record of the contract, lowered straight from the runner's
//! [`Message`]: the guest's copy, in its own memory, is the only one made (the
//! generated `Event` would need an owned copy of every field first).

use wasmtime::component::{ComponentExportIndex, ComponentType, Instance, Lower, TypedFunc};
use wasmtime::Store;

use super::bindings::GuestError;
use super::state::GuestState;
use crate::inbox::Message;

/// `inbox:host/types.event`, borrowing the message it describes.
#[derive(ComponentType, Lower)]
#[component(record)]
pub(super) struct EventRef<'a> {
    #[component(name = "message-id")]
    message_id: &'a str,
    topic: &'a str,
    partition: i32,
    offset: i64,
    key: Option<&'a [u8]>,
    headers: Vec<HeaderRef<'a>>,
    payload: &'a [u8],
}

/// `inbox:host/types.header`, borrowed.
#[derive(ComponentType, Lower)]
#[component(record)]
pub(super) struct HeaderRef<'a> {
    key: &'a str,
    value: Option<&'a [u8]>,
}

impl<'a> EventRef<'a> {
    pub fn of(message: &'a Message) -> Self {
        Self {
            message_id: &message.message_id,
            topic: &message.topic,
            partition: message.partition,
            offset: message.offset,
            key: message.key.as_deref(),
            headers: message
                .headers
                .iter()
                .map(|h| HeaderRef {
                    key: &h.key,
                    value: h.value.as_deref(),
                })
                .collect(),
            payload: &message.payload,
        }
    }
}

/// The guest's `handle` export, typed for a borrowed event.
pub(super) type HandleFunc<'a> = TypedFunc<(EventRef<'a>,), (Result<(), GuestError>,)>;

/// Looks up `handle` in an instance (its type was checked when the plugin loaded).
pub(super) fn handle_func<'a>(
    store: &mut Store<GuestState>,
    instance: &Instance,
    export: &ComponentExportIndex,
) -> wasmtime::Result<HandleFunc<'a>> {
    instance.get_typed_func(store, export)
}
