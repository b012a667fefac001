use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime::ResourceLimiter;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::calls::HandlerCalls;
use super::clock::GuestClock;
use super::db_session::DbSession;
use super::limits::{SandboxLimits, MAX_TABLE_ELEMENTS};
use super::outbox::OutboxSession;
use super::output::GuestOutput;
use super::requests::RequestSession;
use super::sql_checks::CheckedStatements;
use crate::inbox::Tx;

/// Everything one message's guest instance can reach: the `db` session on the
/// inbox transaction, calls through the host's gate (`wasi:http`), and a WASI
/// context that denies the rest of the outside world.
pub(crate) struct GuestState {
    /// The `db` interface's side (linked with a projection onto this field).
    pub db: DbSession,
    /// How long the guest has run, not counting its waits on `db` calls.
    pub clock: GuestClock,
    pub memory: MemoryCap,
    pub stdout: GuestOutput,
    pub stderr: GuestOutput,
    /// The hook every `wasi:http` call goes through.
    pub calls: HandlerCalls,
    http: WasiHttpCtx,
    wasi: WasiCtx,
    table: ResourceTable,
}

impl GuestState {
    pub fn new(tx: Option<Tx>, limits: &SandboxLimits, statements: Arc<CheckedStatements>) -> Self {
        let stdout = GuestOutput::new(limits.output_bytes);
        let stderr = GuestOutput::new(limits.output_bytes);
        // Deny-all: no preopened directories, no environment, no arguments, no
        // sockets, no name lookup (calls go through `wasi:http` and the gate). Clocks and random stay available: they reach
        // nothing outside the process (see docs/security.md).
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let clock = GuestClock::start();
        Self {
            db: DbSession::new(
                tx,
                statements,
                limits.max_param_bytes,
                clock.clone(),
                OutboxSession::new(limits.publish.clone()),
                RequestSession::new(limits.requests.clone()),
            ),
            clock,
            memory: MemoryCap::new(limits.memory_bytes),
            stdout,
            stderr,
            calls: HandlerCalls::new(limits.requests.clone()),
            http: WasiHttpCtx::new(),
            wasi,
            table: ResourceTable::new(),
        }
    }
}

impl GuestState {
    /// Readies the state of a reused instance for the next message: its
    /// transaction, a clock from zero, and a session that knows nothing of the
    /// previous message (the pipes were drained when it ended).
    pub fn next_message(&mut self, tx: Tx) {
        self.db.next_message(tx);
        self.clock.restart();
    }
}

impl WasiHttpView for GuestState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            hooks: &mut self.calls,
            table: &mut self.table,
            ctx: &mut self.http,
        }
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// A cap on everything a guest's store holds, across all its instances: the
/// bytes of all linear memories together, the elements of all tables together,
/// and how many instances, memories and tables there are. It remembers whether
/// it refused a growth, so the trap is classified as *memory*.
pub(crate) struct MemoryCap {
    max_bytes: usize,
    bytes: usize,
    elements: usize,
    pub refused: bool,
}

impl MemoryCap {
    fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            bytes: 0,
            elements: 0,
            refused: false,
        }
    }
}

/// Instances, memories and tables one store may create (a component built from
/// another language holds a few dozen core instances at most).
const MAX_INSTANCES: usize = 64;
const MAX_MEMORIES: usize = 16;
const MAX_TABLES: usize = 64;

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // `current` is 0 when a memory is created, so the sum covers every memory.
        let total = self.bytes - current.min(self.bytes) + desired;
        if total > self.max_bytes {
            self.refused = true;
            wasmtime::bail!(
                "guest memories would grow to {total} bytes together, past the cap of {} bytes",
                self.max_bytes
            );
        }
        self.bytes = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.elements - current.min(self.elements) + desired;
        if total > MAX_TABLE_ELEMENTS {
            return Ok(false);
        }
        self.elements = total;
        Ok(true)
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }
}
