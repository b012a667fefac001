//! The shared wasmtime engine, its instance pool and the linker every plugin
//! is instantiated with.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{
    Cache, CacheConfig, Config, Enabled, Engine, InstanceAllocationStrategy,
    PoolingAllocationConfig,
};

use super::bindings::Handler;
use super::limits::{SandboxLimits, EPOCH_TICK, MAX_TABLE_ELEMENTS};
use super::sql_checks::CheckedStatements;
use super::state::GuestState;

/// The shared wasmtime engine and linker. Clone freely; plugins compiled by one
/// runtime run on it.
#[derive(Clone)]
pub struct Runtime {
    pub(super) engine: Engine,
    pub(super) linker: Arc<Linker<GuestState>>,
    pub(super) limits: SandboxLimits,
    pub(super) statements: Arc<CheckedStatements>,
    /// Nanoseconds guests have run, all messages together (`/metrics`).
    pub(super) guest_nanos: Arc<AtomicU64>,
}

impl Runtime {
    /// A runtime that compiles every plugin it loads.
    pub fn new(limits: SandboxLimits) -> anyhow::Result<Self> {
        Self::build(limits, None)
    }

    /// A runtime that keeps compiled plugins in `dir` (if given), by content
    /// (and engine version and settings): loading a plugin compiled before, by
    /// this or another process, reads native code instead of compiling. The
    /// cache holds native code the host runs, so only the host's user may write
    /// `dir`. A directory that cannot be used is reported and the runtime compiles.
    pub fn with_compile_cache(limits: SandboxLimits, dir: Option<&Path>) -> anyhow::Result<Self> {
        let cache = dir.and_then(|dir| {
            let mut config = CacheConfig::new();
            config.with_directory(dir);
            Cache::new(config)
                .map_err(|e| {
                    tracing::warn!(dir = %dir.display(), error = %format!("{e:#}"),
                        "compile cache unusable; plugins are compiled on every load");
                })
                .ok()
        });
        Self::build(limits, cache)
    }

    fn build(limits: SandboxLimits, cache: Option<Cache>) -> anyhow::Result<Self> {
        let mut config = Config::new();
        config.cache(cache);
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .max_wasm_stack(limits.max_stack_bytes)
            .async_stack_size(limits.max_stack_bytes + (1 << 20))
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pooling(&limits)));
        let engine = Engine::new(&config)?;
        spawn_epoch_ticker(&engine);

        let mut linker = Linker::new(&engine);
        // WASI is linked so that Rust guests built for wasm32-wasip2 instantiate;
        // the context each store gets denies files, sockets, env and args.
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        // Calls in the handler: wasi:http's outgoing handler, sent by the hook
        // in calls.rs through the gate.
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        Handler::add_to_linker::<_, HasSelf<_>>(&mut linker, |state: &mut GuestState| {
            &mut state.db
        })?;
        super::legacy::add_to_linker(&mut linker)?;
        Ok(Self {
            engine,
            linker: Arc::new(linker),
            statements: Arc::new(CheckedStatements::new()),
            guest_nanos: Arc::default(),
            limits,
        })
    }
}

impl Runtime {
    /// Time guests have run (wasm and WASI calls, not waits on queries), all
    /// messages together.
    pub fn guest_run_time(&self) -> Duration {
        Duration::from_nanos(self.guest_nanos.load(Ordering::Relaxed))
    }
}

/// Instances (and their memories, tables and call stacks) live one message
/// each: slots reserved once and reused make a fresh instance per message cheap
/// (no mmap, no munmap, no page faults on a warm slot).
fn pooling(limits: &SandboxLimits) -> PoolingAllocationConfig {
    let mut pooling = PoolingAllocationConfig::new();
    pooling
        .total_component_instances(INSTANCE_SLOTS)
        .total_stacks(INSTANCE_SLOTS)
        // Components built from other languages hold several core modules.
        .total_core_instances(INSTANCE_SLOTS * 16)
        .total_memories(INSTANCE_SLOTS * 2)
        .total_tables(INSTANCE_SLOTS * 4)
        .max_memories_per_module(2)
        .max_tables_per_module(4)
        .table_elements(MAX_TABLE_ELEMENTS)
        .max_memory_size(limits.memory_bytes)
        .max_component_instance_size(8 << 20)
        .max_core_instance_size(8 << 20)
        // Resetting a slot with madvise costs a TLB shootdown across cores per
        // message; where the kernel can list the pages a guest dirtied
        // (PAGEMAP_SCAN, Linux 6.7+), only those are set back with memset.
        .pagemap_scan(Enabled::Auto)
        .linear_memory_keep_resident(limits.memory_bytes.min(KEEP_RESIDENT))
        .table_keep_resident(KEEP_RESIDENT / 8);
    pooling
}

/// Bytes of a slot's memory reset in place rather than given back to the kernel.
const KEEP_RESIDENT: usize = 8 << 20;

/// Guest instances alive at once: one per batch in flight, plus hot-swap checks.
const INSTANCE_SLOTS: u32 = 128;

/// Advances the engine's epoch every tick until the engine is dropped.
fn spawn_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    thread::Builder::new()
        .name("wasm-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                thread::sleep(EPOCH_TICK);
            }
        })
        .expect("spawning the epoch thread");
}
