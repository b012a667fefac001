use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime::ResourceLimiter;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::DbError;
use super::engine::SandboxLimits;
use super::sql_checks::CheckedStatements;
use crate::inbox::Tx;

/// Everything one message's guest instance can reach: the inbox transaction and a
/// WASI context that denies the outside world.
pub(crate) struct GuestState {
    /// `None` only for an offline check, where `db` calls trap.
    pub tx: Option<Tx>,
    /// The first statement PostgreSQL rejected: it aborted the transaction.
    pub failed_statement: Option<DbError>,
    /// When the guest started, and how long it has since spent waiting on `db`
    /// calls: the CPU deadline counts only the difference.
    pub started: Instant,
    pub waited: Duration,
    /// The first statement the host refused (it was not sent): a failure after it
    /// is classified `db-rule`.
    pub refused_statement: Option<DbError>,
    pub statements: Arc<CheckedStatements>,
    pub memory: MemoryCap,
    pub stdout: MemoryOutputPipe,
    pub stderr: MemoryOutputPipe,
    wasi: WasiCtx,
    table: ResourceTable,
}

impl GuestState {
    pub fn new(tx: Option<Tx>, limits: &SandboxLimits, statements: Arc<CheckedStatements>) -> Self {
        let stdout = MemoryOutputPipe::new(limits.output_bytes);
        let stderr = MemoryOutputPipe::new(limits.output_bytes);
        // Deny-all: no preopened directories, no environment, no arguments, no
        // sockets, no name lookup. Clocks and random stay available: they reach
        // nothing outside the process (see docs/security.md).
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        Self {
            tx,
            failed_statement: None,
            started: Instant::now(),
            waited: Duration::ZERO,
            refused_statement: None,
            statements,
            memory: MemoryCap::new(limits.memory_bytes),
            stdout,
            stderr,
            wasi,
            table: ResourceTable::new(),
        }
    }
}

impl GuestState {
    /// Time the guest has run wasm, excluding waits on the database.
    pub fn ran_for(&self) -> Duration {
        self.started.elapsed().saturating_sub(self.waited)
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

/// A memory cap that remembers whether it refused a growth, so the trap can be
/// classified as *memory* rather than a generic trap.
pub(crate) struct MemoryCap {
    max_bytes: usize,
    pub refused: bool,
}

impl MemoryCap {
    fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            refused: false,
        }
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_bytes {
            self.refused = true;
            wasmtime::bail!(
                "guest memory would grow to {desired} bytes, past its cap of {} bytes",
                self.max_bytes
            );
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= super::engine::MAX_TABLE_ELEMENTS)
    }
}
