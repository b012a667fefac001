//! Running a plugin for one message: a fresh store that owns the inbox
//! transaction, one instance, one call, and a verdict the runner can act on.

use wasmtime::{Store, Trap, UpdateDeadline};

use super::bindings::{Event, Header};
use super::db_host::ConnectionLost;
use super::loader::{LoadError, Plugin};
use super::state::GuestState;
use crate::inbox::{FailureKind, Handler, HandlerError, Message, Tx};

impl Handler for Plugin {
    fn version(&self) -> &str {
        &self.digest
    }

    async fn handle(&self, message: &Message, tx: Tx) -> (Tx, Result<(), HandlerError>) {
        let mut store = self.new_store(Some(tx));
        let returned = async {
            let instance = self.pre.instantiate_async(&mut store).await?;
            instance.call_handle(&mut store, &event_of(message)).await
        }
        .await;
        let state = store.into_data();
        self.log_output(&state, message);
        let verdict = match returned {
            Ok(Ok(())) => match &state.failed_statement {
                // PostgreSQL aborted the transaction; say why rather than letting
                // the runner find it unusable.
                Some(e) => Err(HandlerError::new(
                    FailureKind::TransactionBroken,
                    is_retryable_sqlstate(&e.code),
                    format!(
                        "the handler returned ok after a statement failed ({} {}); a failed \
                         statement aborts the transaction, so nothing was committed",
                        e.code, e.message
                    ),
                )),
                None => Ok(()),
            },
            Ok(Err(e)) => Err(HandlerError::new(
                FailureKind::HandlerError,
                e.retryable,
                e.message,
            )),
            Err(trap) => Err(classify(&trap, &state)),
        }
        .map_err(|error| blame_refusal(error, &state));
        let tx = state
            .tx
            .expect("the store owns the transaction until the call ends");
        (tx, verdict)
    }
}

impl Plugin {
    /// Instantiates the plugin once in the sandbox without a transaction: what
    /// `inbox-host check` and a hot swap do before accepting a new version.
    pub async fn check_instantiation(&self) -> Result<(), LoadError> {
        let mut store = self.new_store(None);
        self.pre
            .instantiate_async(&mut store)
            .await
            .map(drop)
            .map_err(|e| LoadError::Instantiate {
                path: self.name.clone(),
                reason: format!("{e:#}"),
            })
    }

    fn new_store(&self, tx: Option<Tx>) -> Store<GuestState> {
        let limits = &self.runtime.limits;
        let mut store = Store::new(
            &self.runtime.engine,
            GuestState::new(tx, limits, self.runtime.statements.clone()),
        );
        store.limiter(|state| &mut state.memory);
        // Checked every epoch tick: the deadline counts time running wasm, not time
        // waiting on queries (statement_timeout bounds those). Between checks the
        // guest yields, so a busy guest does not hold an executor thread.
        let deadline = limits.deadline;
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |ctx| {
            Ok(if ctx.data().ran_for() >= deadline {
                UpdateDeadline::Interrupt
            } else {
                UpdateDeadline::Yield(1)
            })
        });
        store
    }

    fn log_output(&self, state: &GuestState, message: &Message) {
        for (stream, pipe) in [("stdout", &state.stdout), ("stderr", &state.stderr)] {
            let bytes = pipe.contents();
            for line in String::from_utf8_lossy(&bytes)
                .lines()
                .filter(|l| !l.is_empty())
            {
                tracing::info!(
                    plugin = %self.name,
                    stream,
                    message_id = %message.message_id,
                    "{line}"
                );
            }
        }
    }
}

fn event_of(message: &Message) -> Event {
    Event {
        message_id: message.message_id.clone(),
        topic: message.topic.clone(),
        partition: message.partition,
        offset: message.offset,
        key: message.key.clone(),
        headers: message
            .headers
            .iter()
            .map(|h| Header {
                key: h.key.clone(),
                value: h.value.clone(),
            })
            .collect(),
        payload: message.payload.clone(),
    }
}

/// Names the trap: deadline, memory, stack, panic, lost connection or other.
fn classify(error: &wasmtime::Error, state: &GuestState) -> HandlerError {
    let detail = format!("{error:#}");
    if let Some(lost) = error.downcast_ref::<ConnectionLost>() {
        return HandlerError::new(FailureKind::Database, true, lost.to_string());
    }
    if state.memory.refused {
        return HandlerError::new(
            FailureKind::Memory,
            false,
            format!("guest exceeded its memory cap: {detail}"),
        );
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => HandlerError::new(
            FailureKind::Deadline,
            true,
            "guest ran past its deadline and was interrupted".to_string(),
        ),
        Some(Trap::StackOverflow) => HandlerError::new(
            FailureKind::Stack,
            false,
            "guest overflowed its stack".to_string(),
        ),
        Some(Trap::UnreachableCodeReached) => {
            let stderr = state.stderr.contents();
            let said = String::from_utf8_lossy(&stderr);
            let last = said
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no message");
            HandlerError::new(FailureKind::Panic, false, format!("guest panicked: {last}"))
        }
        _ => HandlerError::new(FailureKind::Trap, false, format!("guest trapped: {detail}")),
    }
}

/// A handler that failed or panicked after the host refused one of its
/// statements failed because of the refusal: `db-rule`, which waiting cannot fix.
fn blame_refusal(error: HandlerError, state: &GuestState) -> HandlerError {
    match (&state.refused_statement, error.kind) {
        (Some(refused), FailureKind::HandlerError | FailureKind::Panic) => HandlerError::new(
            FailureKind::DbRule,
            false,
            format!(
                "{} (after the host refused a statement: {} {})",
                error.message, refused.code, refused.message
            ),
        ),
        _ => error,
    }
}

/// SQLSTATEs after which the same work may succeed: serialization failures and
/// deadlocks (class 40), lock timeouts, cancelled statements.
fn is_retryable_sqlstate(code: &str) -> bool {
    code.starts_with("40") || code == "55P03" || code == "57014"
}
