//! Plugins built against `inbox:host@0.2.0` (`wit/legacy/0.2.0/`) run
//! unchanged: their `db` import is linked to the same session as 0.3.0's, its
//! values converted field by field (the two versions' `db` interfaces are the
//! same; 0.3.0 adds `outbox`). Their `handle` export has the same type in both.
//! Plugins built against 0.3.0 link to 0.3.1's interfaces by semver (0.3.1
//! only adds `requests`).

mod v0_2 {
    wasmtime::component::bindgen!({
        path: "../wit/legacy/0.2.0",
        world: "handler",
        imports: { default: async | trappable },
    });
}

use v0_2::inbox::host::{db as old, types as old_types};

use super::bindings::inbox::host::db;
use super::db_session::DbSession;
use super::state::GuestState;
use wasmtime::component::{HasSelf, Linker};

/// The versions of the contract this host links, newest first (docs/wit.md).
pub const CONTRACTS: &[&str] = &["inbox:host@0.3.1", "inbox:host@0.3.0", "inbox:host@0.2.0"];

/// Links the 0.2.0 `db` interface beside 0.3.0's.
pub(super) fn add_to_linker(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    v0_2::Handler::add_to_linker::<_, HasSelf<_>>(linker, |state: &mut GuestState| &mut state.db)
}

impl old_types::Host for DbSession {}

impl old::Host for DbSession {
    async fn execute(
        &mut self,
        sql: String,
        params: Vec<old::Value>,
    ) -> wasmtime::Result<Result<u64, old::DbError>> {
        let params = params.into_iter().map(new_value).collect();
        let done = db::Host::execute(self, sql, params).await?;
        Ok(done.map_err(old_error))
    }

    async fn query(
        &mut self,
        sql: String,
        params: Vec<old::Value>,
    ) -> wasmtime::Result<Result<old::Rows, old::DbError>> {
        let params = params.into_iter().map(new_value).collect();
        let done = db::Host::query(self, sql, params).await?;
        Ok(done
            .map(|rows| old::Rows {
                columns: rows.columns,
                rows: rows
                    .rows
                    .into_iter()
                    .map(|row| row.into_iter().map(old_value).collect())
                    .collect(),
            })
            .map_err(old_error))
    }
}

fn old_error(e: db::DbError) -> old::DbError {
    old::DbError {
        code: e.code,
        message: e.message,
        retryable: e.retryable,
    }
}

fn new_value(v: old::Value) -> db::Value {
    match v {
        old::Value::Null => db::Value::Null,
        old::Value::Boolean(b) => db::Value::Boolean(b),
        old::Value::Int32(i) => db::Value::Int32(i),
        old::Value::Int64(i) => db::Value::Int64(i),
        old::Value::Float64(f) => db::Value::Float64(f),
        old::Value::Text(t) => db::Value::Text(t),
        old::Value::Bytes(b) => db::Value::Bytes(b),
        old::Value::Json(j) => db::Value::Json(j),
        old::Value::Timestamp(t) => db::Value::Timestamp(t),
    }
}

fn old_value(v: db::Value) -> old::Value {
    match v {
        db::Value::Null => old::Value::Null,
        db::Value::Boolean(b) => old::Value::Boolean(b),
        db::Value::Int32(i) => old::Value::Int32(i),
        db::Value::Int64(i) => old::Value::Int64(i),
        db::Value::Float64(f) => old::Value::Float64(f),
        db::Value::Text(t) => old::Value::Text(t),
        db::Value::Bytes(b) => old::Value::Bytes(b),
        db::Value::Json(j) => old::Value::Json(j),
        db::Value::Timestamp(t) => old::Value::Timestamp(t),
    }
}
