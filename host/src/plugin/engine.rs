use std::sync::Arc;
use std::thread;
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine};

use super::bindings::Handler;
use super::sql_checks::CheckedStatements;
use super::state::GuestState;

/// Wall-clock resolution of the per-message CPU deadline.
pub(super) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// What one message's guest may use.
#[derive(Debug, Clone)]
pub struct SandboxLimits {
    /// The longest a guest may run wasm for one message (wall-clock, checked every
    /// 10 ms). Time waiting on `db` calls does not count: `statement_timeout`
    /// bounds those, since an epoch cannot interrupt a host await.
    pub deadline: Duration,
    /// The most linear memory a guest instance may have, in bytes.
    pub memory_bytes: usize,
    /// The most native stack wasm code may use, in bytes.
    pub max_stack_bytes: usize,
    /// Bytes of stdout and of stderr kept per message for the host log.
    pub output_bytes: usize,
    /// Check guest SQL before it runs (docs/security.md). Off only to measure
    /// what the check costs; never in production.
    pub check_sql: bool,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(5),
            memory_bytes: 64 << 20,
            max_stack_bytes: 512 << 10,
            output_bytes: 256 << 10,
            check_sql: true,
        }
    }
}

/// The shared wasmtime engine and linker. Clone freely; plugins compiled by one
/// runtime run on it.
#[derive(Clone)]
pub struct Runtime {
    pub(super) engine: Engine,
    pub(super) linker: Arc<Linker<GuestState>>,
    pub(super) limits: SandboxLimits,
    pub(super) statements: Arc<CheckedStatements>,
}

impl Runtime {
    pub fn new(limits: SandboxLimits) -> anyhow::Result<Self> {
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .max_wasm_stack(limits.max_stack_bytes)
            .async_stack_size(limits.max_stack_bytes + (1 << 20));
        let engine = Engine::new(&config)?;
        spawn_epoch_ticker(&engine);

        let mut linker = Linker::new(&engine);
        // WASI is linked so that Rust guests built for wasm32-wasip2 instantiate;
        // the context each store gets denies files, sockets, env and args.
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        Handler::add_to_linker::<_, HasSelf<_>>(&mut linker, |state: &mut GuestState| state)?;
        Ok(Self {
            engine,
            linker: Arc::new(linker),
            statements: Arc::new(CheckedStatements::new(limits.check_sql)),
            limits,
        })
    }

    pub fn limits(&self) -> &SandboxLimits {
        &self.limits
    }
}

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
