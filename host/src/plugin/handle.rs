//! Running a plugin for one message: a fresh store that owns the inbox
//! transaction, one instance, one call, and a verdict the runner can act on.

use wasmtime::{Store, Trap, UpdateDeadline};

use super::db_session::ConnectionLost;
use super::event::{handle_func, EventRef};
use super::loader::{LoadError, Plugin, Reusable};
use super::state::GuestState;
use crate::inbox::{storable_text, AfterCommit, FailureKind, Handler, HandlerError, Message, Tx};

/// Guest output logged per message: lines, bytes in all, and bytes per line.
const LOGGED_OUTPUT_LINES: usize = 20;
const LOGGED_OUTPUT_BYTES: usize = 8 << 10;
const LOGGED_LINE_BYTES: usize = 1024;

/// The guest was still blocked in a host call when its deadline passed.
#[derive(Debug, thiserror::Error)]
#[error("guest was blocked in a host call (such as a sleep) past its deadline and was cancelled")]
struct BlockedPastDeadline;

impl Handler for Plugin {
    fn version(&self) -> &str {
        &self.digest
    }

    async fn handle(&self, message: &Message, tx: Tx) -> (Tx, Result<AfterCommit, HandlerError>) {
        let (mut store, kept) = match self.idle_instance() {
            Some(Reusable {
                mut store,
                instance,
            }) => {
                store.data_mut().next_message(tx);
                store.set_epoch_deadline(1);
                (store, Some(instance))
            }
            None => (self.new_store(Some(tx)), None),
        };
        let state = store.data_mut();
        state.db.requests.next_message(&message.message_id);
        state.calls.next_message(&message.message_id);
        let clock = store.data().clock.clone();
        let call = async {
            let instance = match kept {
                Some(instance) => instance,
                None => {
                    self.pre
                        .instance_pre()
                        .instantiate_async(&mut store)
                        .await?
                }
            };
            let handle = handle_func(&mut store, &instance, &self.handle_export)?;
            let (returned,) = handle
                .call_async(&mut store, (EventRef::of(message),))
                .await?;
            Ok((returned, instance))
        };
        // The epoch stops a guest running wasm; a guest blocked in a host call
        // (a WASI sleep) is stopped here, its call dropped.
        let returned: wasmtime::Result<_> = tokio::select! {
            returned = call => returned,
            () = clock.reaches(self.runtime.limits.deadline) => Err(BlockedPastDeadline.into()),
        };
        let state = store.data_mut();
        let ran = u64::try_from(state.clock.ran_for().as_nanos()).unwrap_or(u64::MAX);
        self.runtime
            .guest_nanos
            .fetch_add(ran, std::sync::atomic::Ordering::Relaxed);
        let output = Output {
            stdout: state.stdout.take(),
            stderr: state.stderr.take(),
        };
        self.log_output(&output, state, message);
        let (verdict, instance) = match returned {
            Ok((Ok(()), instance)) => match &state.db.failed_statement {
                // PostgreSQL aborted the transaction; say why rather than letting
                // the runner find it unusable.
                Some(e) => (
                    Err(HandlerError::new(
                        FailureKind::TransactionBroken,
                        e.retryable,
                        format!(
                            "the handler returned ok after a statement failed ({} {}); a failed \
                             statement aborts the transaction, so nothing was committed",
                            e.code, e.message
                        ),
                    )),
                    None,
                ),
                None => (Ok(()), Some(instance)),
            },
            Ok((Err(e), _)) => (
                Err(HandlerError::new(
                    FailureKind::HandlerError,
                    e.retryable,
                    e.message,
                )),
                None,
            ),
            Err(trap) => (Err(classify(&trap, state, &output)), None),
        };
        // A refused call counts as a refused request: the run fails for it.
        if state.db.requests.refused.is_none() {
            state.db.requests.refused = state.calls.lock().refused.take();
        }
        // A refused publication, request or statement cannot be fixed by running
        // again: whatever the guest made of the error, the record fails for good.
        let refused_request = state.db.requests.refused.as_ref();
        let verdict = match (verdict, &state.db.outbox.refused, &state.db.refused_statement) {
            (Ok(()), _, _) if refused_request.is_some() => Err(HandlerError::new(
                FailureKind::RequestRule,
                false,
                format!("the host refused a request the handler asked for ({}); nothing was committed",
                    refused_request.map(|r| format!("{} {}", r.code, r.message)).unwrap_or_default()),
            )),
            (Ok(()), Some(refused), _) => Err(HandlerError::new(
                FailureKind::PublishRule,
                false,
                format!("the host refused a message the handler published ({} {}); nothing was committed",
                    refused.code, refused.message),
            )),
            (Ok(()), None, Some(refused)) => Err(HandlerError::new(
                FailureKind::DbRule,
                false,
                format!("the handler returned ok after the host refused one of its statements ({} {}); \
                    a refused statement fails the run, so nothing was committed",
                    refused.code, refused.message),
            )),
            (verdict, _, _) => verdict.map_err(|error| blame_refusal(error, state)),
        };
        let verdict = verdict.map(|()| AfterCommit {
            messages: state.db.outbox.take(),
            requests: state.db.requests.take(),
        });
        let tx = state
            .db
            .tx
            .take()
            .expect("the store owns the transaction until the call ends");
        // Only an instance whose message succeeded is kept: after a trap or an
        // error its state is not trusted.
        if let Some(instance) = instance.filter(|_| self.runtime.limits.reuse_instance) {
            self.keep_instance(Reusable { store, instance });
        }
        (tx, verdict)
    }
}

/// What a guest wrote to stdout and stderr during one message.
struct Output {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Plugin {
    /// Instantiates the plugin once in the sandbox without a transaction: what
    /// `inbox-host check` and a hot swap do before accepting a new version.
    pub async fn check_instantiation(&self) -> Result<(), LoadError> {
        let mut store = self.new_store(None);
        let instance = self
            .pre
            .instance_pre()
            .instantiate_async(&mut store)
            .await
            .map_err(|e| LoadError::Instantiate {
                path: self.name.clone(),
                reason: format!("{e:#}"),
            })?;
        handle_func(&mut store, &instance, &self.handle_export)
            .map(drop)
            .map_err(|e| LoadError::WrongWorld {
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
            Ok(if ctx.data().clock.ran_for() >= deadline {
                UpdateDeadline::Interrupt
            } else {
                UpdateDeadline::Yield(1)
            })
        });
        store
    }

    /// Logs what the guest printed, bounded per message: the first lines, each
    /// escaped and marked as the guest's, then one line counting the rest.
    fn log_output(&self, output: &Output, state: &GuestState, message: &Message) {
        let (mut logged, mut logged_bytes, mut left_out) = (0, 0, 0);
        for (stream, bytes) in [("stdout", &output.stdout), ("stderr", &output.stderr)] {
            for line in String::from_utf8_lossy(bytes)
                .lines()
                .filter(|l| !l.is_empty())
            {
                if logged == LOGGED_OUTPUT_LINES || logged_bytes >= LOGGED_OUTPUT_BYTES {
                    left_out += 1;
                    continue;
                }
                let line = storable_text(line, LOGGED_LINE_BYTES);
                logged += 1;
                logged_bytes += line.len();
                tracing::info!(
                    plugin = %self.name,
                    message_id = %message.message_id,
                    "guest {stream}: {line}"
                );
            }
        }
        if left_out > 0 {
            tracing::info!(plugin = %self.name, message_id = %message.message_id,
                "guest output: {left_out} more lines not logged (at most {LOGGED_OUTPUT_LINES} lines, {LOGGED_OUTPUT_BYTES} bytes per message)");
        }
        for (what, refusals) in [
            ("statement", &state.db.refusals),
            ("publication", &state.db.outbox.refusals),
            ("request", &state.db.requests.refusals),
            ("call", &state.calls.lock().refusals),
        ] {
            let unlogged = refusals.unlogged();
            if unlogged > 0 {
                tracing::warn!(plugin = %self.name, message_id = %message.message_id,
                    "guest {what} refused: {unlogged} more refusals in this message not logged");
            }
        }
    }
}

/// Names the trap: deadline, memory, stack, panic, lost connection or other.
fn classify(error: &wasmtime::Error, state: &GuestState, output: &Output) -> HandlerError {
    let detail = format!("{error:#}");
    if let Some(lost) = error.downcast_ref::<ConnectionLost>() {
        return HandlerError::new(FailureKind::Database, true, lost.to_string());
    }
    if let Some(blocked) = error.downcast_ref::<BlockedPastDeadline>() {
        return HandlerError::new(FailureKind::Deadline, true, blocked.to_string());
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
            "guest ran past its deadline and was interrupted",
        ),
        Some(Trap::StackOverflow) => {
            HandlerError::new(FailureKind::Stack, false, "guest overflowed its stack")
        }
        Some(Trap::UnreachableCodeReached) => {
            let said = panic_message(&String::from_utf8_lossy(&output.stderr));
            HandlerError::new(FailureKind::Panic, false, format!("guest panicked: {said}"))
        }
        _ => HandlerError::new(FailureKind::Trap, false, format!("guest trapped: {detail}")),
    }
}

/// What a guest said when it panicked: a Python traceback's exception line;
/// Rust's `panicked at <place>:` line and the message after it (not the `note:
/// run with RUST_BACKTRACE=1` hint that follows); the JavaScript SDK's
/// `uncaught <exception>` line; otherwise the last line it wrote.
fn panic_message(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    // The JavaScript SDK's crash line; the runtime's abort notice follows it.
    if let Some(uncaught) = lines.iter().rev().find(|l| l.starts_with("uncaught ")) {
        return (*uncaught).to_string();
    }
    // Python (componentize-py): the exception line ends the traceback; the
    // runtime's own panic that follows only says an exception was thrown.
    if let Some(at) = lines
        .iter()
        .rposition(|l| l.starts_with("Traceback (most recent call last)"))
    {
        if let Some(exception) = lines[at + 1..].iter().find(|l| !l.starts_with(' ')) {
            return (*exception).to_string();
        }
    }
    if let Some(at) = lines.iter().rposition(|l| l.contains("panicked at")) {
        return lines[at..]
            .iter()
            .take_while(|l| !l.starts_with("note: run with `RUST_BACKTRACE"))
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
    }
    lines
        .last()
        .map_or_else(|| "no message".into(), |l| (*l).to_string())
}

/// A handler that failed or panicked after the host refused one of its
/// publications or statements failed because of the refusal: `publish-rule` or
/// `db-rule`, which waiting cannot fix.
fn blame_refusal(error: HandlerError, state: &GuestState) -> HandlerError {
    if let (Some(refused), FailureKind::HandlerError | FailureKind::Panic) =
        (&state.db.requests.refused, error.kind)
    {
        return HandlerError::new(
            FailureKind::RequestRule,
            false,
            format!(
                "{} (after the host refused a request it asked for: {} {})",
                error.message, refused.code, refused.message
            ),
        );
    }
    if let (Some(refused), FailureKind::HandlerError | FailureKind::Panic) =
        (&state.db.outbox.refused, error.kind)
    {
        return HandlerError::new(
            FailureKind::PublishRule,
            false,
            format!(
                "{} (after the host refused a message it published: {} {})",
                error.message, refused.code, refused.message
            ),
        );
    }
    match (&state.db.refused_statement, error.kind) {
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

#[cfg(test)]
mod tests {
    use super::panic_message;

    #[test]
    fn a_rust_panic_is_named_by_its_message_not_the_backtrace_hint() {
        let stderr = "\nthread '<unnamed>' panicked at src/lib.rs:9:5:\nbad order 7\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            panic_message(stderr),
            "thread '<unnamed>' panicked at src/lib.rs:9:5: bad order 7"
        );
        assert_eq!(
            panic_message("Traceback...\nValueError: x\n"),
            "ValueError: x"
        );
        let python = "Traceback (most recent call last):\n  File \"handler.py\", line 3, in handle\n    raise ValueError(\"boom\")\nValueError: boom\nthread '<unnamed>' (1) panicked at runtime/src/lib.rs:1293:29:\nPython function threw an unexpected exception\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(panic_message(python), "ValueError: boom");
        let js = "uncaught Error: boom\nRedirecting call to abort() to mozalloc_abort\n";
        assert_eq!(panic_message(js), "uncaught Error: boom");
        assert_eq!(panic_message(""), "no message");
    }
}
