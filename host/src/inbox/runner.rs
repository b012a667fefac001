use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use sqlx::PgPool;
use tokio::time::Instant;

use super::claim::{self, BatchClaim};
use super::store::{self, ClaimBy};
use super::{outbox, partitions, requests};
use super::{
    AfterCommit, FailureKind, Handler, HandlerError, Message, Outcome, RunnerSettings, Tx,
};

/// Runs messages through begin → inbox rows → handler per message → commit,
/// one at a time or a batch per transaction.
#[derive(Debug, Clone)]
pub struct Runner {
    pool: PgPool,
    settings: RunnerSettings,
}

impl Runner {
    pub fn new(pool: PgPool, settings: RunnerSettings) -> Self {
        Self { pool, settings }
    }

    pub fn settings(&self) -> &RunnerSettings {
        &self.settings
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Processes one message. Nothing is committed unless the outcome is
    /// [`Outcome::Processed`]; every other outcome leaves the database as it was.
    pub async fn process<H: Handler>(&self, message: &Message, handler: &H) -> Outcome {
        let mut tried = self.try_batch(&[message], handler).await;
        if tried.as_ref().is_err_and(partitions::is_missing) && self.prepare_partitions().await {
            tried = self.try_batch(&[message], handler).await;
        }
        match tried {
            Ok(Batch::Committed(outcomes)) => {
                outcomes.into_iter().next().expect("an outcome per message")
            }
            Ok(Batch::FailedAt(_, failure)) => failure,
            Ok(Batch::Locked) => Outcome::Locked,
            Ok(Batch::Broken(error)) => Outcome::Failed(error),
            Err(e) => Outcome::Failed(HandlerError::new(
                FailureKind::Database,
                true,
                format!("database error around the handler: {e}"),
            )),
        }
    }

    /// Processes the messages of one partition, in offset order, in as few
    /// transactions as the outcomes allow. Returns an outcome per message
    /// attempted, in order: all but the last are committed (processed or
    /// duplicate); the last may be anything, and the messages after it were not
    /// attempted.
    ///
    /// One multi-row claim finds the new messages; duplicates (also within the
    /// batch) skip the handler; each new message runs in offset order on a fresh
    /// handler instance; one pre-commit check and one `COMMIT` end the batch. When
    /// a message fails, the batch is rolled back and the messages before it are
    /// committed again as their own batch, so a failure never costs the work
    /// before it (docs/semantics.md says why this replay beats a savepoint per
    /// message). A held inbox row sends the batch through one message at a time.
    pub async fn process_batch<H: Handler>(
        &self,
        messages: &[&Message],
        handler: &H,
    ) -> Vec<Outcome> {
        if messages.len() <= 1 {
            let mut outcomes = Vec::with_capacity(1);
            if let Some(message) = messages.first() {
                outcomes.push(self.process(message, handler).await);
            }
            return outcomes;
        }
        match self.try_batch(messages, handler).await {
            Ok(Batch::Committed(outcomes)) => outcomes,
            Ok(Batch::FailedAt(at, failure)) => {
                let mut outcomes = Box::pin(self.process_batch(&messages[..at], handler)).await;
                if outcomes.len() == at && outcomes.iter().all(Outcome::committed) {
                    outcomes.push(failure);
                }
                outcomes
            }
            // Which message is held, or broke the transaction, shows when they
            // run one at a time.
            Ok(Batch::Locked | Batch::Broken(_)) | Err(_) => {
                self.one_by_one(messages, handler).await
            }
        }
    }

    /// Creates the group's partitions when a claim found none (the host
    /// prepares them at start; this serves every other user of the runner).
    async fn prepare_partitions(&self) -> bool {
        let group = &self.settings.group;
        match partitions::prepare(&self.pool, group, partitions::PREPARED_BEHIND).await {
            Ok(made) => {
                tracing::info!(group, made, "prepared the group's inbox partitions");
                true
            }
            Err(e) => {
                tracing::warn!(group, error = %e, "could not prepare the group's inbox partitions");
                false
            }
        }
    }

    async fn one_by_one<H: Handler>(&self, messages: &[&Message], handler: &H) -> Vec<Outcome> {
        let mut outcomes = Vec::with_capacity(messages.len());
        for message in messages {
            let outcome = self.process(message, handler).await;
            let committed = outcome.committed();
            outcomes.push(outcome);
            if !committed {
                break;
            }
        }
        outcomes
    }

    /// One transaction for the messages (one or many): claim, handlers in
    /// order, the pre-commit check, outbox rows, COMMIT.
    async fn try_batch<H: Handler>(
        &self,
        messages: &[&Message],
        handler: &H,
    ) -> Result<Batch, sqlx::Error> {
        let by = self.claim_by(handler);
        let mut tx = self.pool.begin().await?;
        let until = Instant::now() + self.settings.transaction_timeout;
        let (runs, xid) = if self.settings.strategy.uses_inbox() {
            let firsts = first_occurrences(messages);
            let distinct: Vec<&Message> = messages
                .iter()
                .zip(&firsts)
                .filter_map(|(m, first)| first.then_some(*m))
                .collect();
            match claim::claim_batch(&mut tx, &distinct, &by).await? {
                BatchClaim::Locked => {
                    rollback(tx).await;
                    return Ok(Batch::Locked);
                }
                BatchClaim::New { ids, xid } => {
                    let runs = messages
                        .iter()
                        .zip(firsts)
                        .map(|(m, first)| first && ids.contains(&m.message_id))
                        .collect::<Vec<_>>();
                    (runs, xid)
                }
            }
        } else {
            (
                vec![true; messages.len()],
                Some(store::begin_plain(&mut tx, &by).await?),
            )
        };
        let Some(xid) = xid else {
            tx.rollback().await?;
            return Ok(Batch::Committed(vec![Outcome::Duplicate; messages.len()]));
        };
        let mut outcomes = Vec::with_capacity(messages.len());
        let mut published = Published::default();
        for (at, (message, run)) in messages.iter().zip(runs).enumerate() {
            if !run {
                outcomes.push(Outcome::Duplicate);
                continue;
            }
            match self.run_handler(handler, message, tx, until).await {
                Ok((returned, after_commit)) => {
                    tx = returned;
                    published.push(message, after_commit);
                }
                Err(failed) => {
                    let error = failed.rolled_back().await;
                    return Ok(Batch::FailedAt(at, Outcome::Failed(error)));
                }
            }
            outcomes.push(Outcome::Processed);
            // Large publications are stored as they come, so a batch holds at
            // most about one record's (`--max-publish-bytes`) besides the bound.
            // (Checked first as before the commit: resuming the guest role must
            // not hide a role the handlers changed.)
            if published.bytes > STAGED_EARLY_BYTES && at + 1 < messages.len() {
                let staged = match still_ours(&mut tx, &xid, by.guest_role).await {
                    Ok(()) => self.stage(&mut tx, &mut published).await?,
                    Err(broken) => Err(broken),
                };
                if let Err(broken) = staged {
                    rollback(tx).await;
                    return Ok(Batch::Broken(broken));
                }
                store::resume_guest_role(&mut tx, by.guest_role).await?;
            }
        }
        if let Err(broken) = still_ours(&mut tx, &xid, by.guest_role).await {
            rollback(tx).await;
            return Ok(Batch::Broken(broken));
        }
        if let Err(unstorable) = self.stage(&mut tx, &mut published).await? {
            rollback(tx).await;
            return Ok(Batch::Broken(unstorable));
        }
        tx.commit().await?;
        Ok(Batch::Committed(outcomes))
    }

    /// Stores (and forgets) what the handlers published and requested so far,
    /// on the host's role. A failure a retry cannot fix (PostgreSQL refused
    /// what a handler gave it) is the handlers' broken publish rule, never a
    /// retryable database error: it would hold the partition for ever.
    async fn stage(
        &self,
        tx: &mut Tx,
        published: &mut Published<'_>,
    ) -> Result<Result<(), HandlerError>, sqlx::Error> {
        if published.runs.is_empty() {
            return Ok(Ok(()));
        }
        let group = &self.settings.group;
        let staged = async {
            store::as_host(tx).await?;
            outbox::stage(tx, group, &published.runs).await?;
            requests::stage(tx, group, &published.runs).await
        }
        .await;
        *published = Published::default();
        match staged {
            Ok(()) => Ok(Ok(())),
            Err(e) if store::fails_for_good(&e) => Ok(Err(HandlerError::new(
                FailureKind::PublishRule,
                false,
                format!("the host could not store a message or request the handler gave it: {e}"),
            ))),
            Err(e) => Err(e),
        }
    }

    fn claim_by<'a, H: Handler>(&'a self, handler: &'a H) -> ClaimBy<'a> {
        ClaimBy {
            group: &self.settings.group,
            worker_id: &self.settings.worker_id,
            version: handler.version(),
            lock_timeout: self.settings.lock_timeout,
            statement_timeout: self.settings.statement_timeout,
            transaction_timeout: self.settings.transaction_timeout,
            guest_role: self.settings.guest_role.as_deref(),
            resend_window: self.settings.resend_window,
        }
    }

    /// Runs the handler within what is left of the transaction's time. Past it,
    /// or when the host panics while handling (a bug, but one a message could
    /// trigger again and again), the handler is dropped with the transaction,
    /// which rolls it back, and the message fails: the process never does.
    async fn run_handler<H: Handler>(
        &self,
        handler: &H,
        message: &Message,
        tx: Tx,
        until: Instant,
    ) -> Result<(Tx, AfterCommit), HandlerFailed> {
        let call = AssertUnwindSafe(handler.handle(message, tx)).catch_unwind();
        let dropped = |error| HandlerFailed { tx: None, error };
        match tokio::time::timeout_at(until, call).await {
            Ok(Ok((tx, Ok(after_commit)))) => Ok((tx, after_commit)),
            Ok(Ok((tx, Err(error)))) => Err(HandlerFailed {
                tx: Some(tx),
                error,
            }),
            Ok(Err(panic)) => {
                let said = crate::panics::text(&*panic);
                tracing::error!(message_id = %message.message_id, panic = %said, "the host panicked handling a message; rolled back");
                let error = format!("the host panicked while handling this message: {said}");
                Err(dropped(HandlerError::new(
                    FailureKind::HostPanic,
                    false,
                    error,
                )))
            }
            Err(_elapsed) => {
                let limit = self.settings.transaction_timeout.as_millis();
                let error = format!(
                    "the transaction was open longer than --transaction-timeout-ms ({limit} ms); \
                     the handler was cancelled and everything rolled back"
                );
                Err(dropped(HandlerError::new(
                    FailureKind::Deadline,
                    true,
                    error,
                )))
            }
        }
    }

    /// Runs `handler` for `message` the way [`Runner::process`] would — the
    /// same transaction limits, guest role, deadline and pre-commit check — and
    /// always rolls back: what the handler would do, and nothing left behind
    /// (no inbox row, no attempt, no effect, nothing published). `Processed`
    /// means it would have committed, publishing the messages returned with it.
    pub async fn rehearse<H: Handler>(
        &self,
        message: &Message,
        handler: &H,
    ) -> (Outcome, AfterCommit) {
        let by = self.claim_by(handler);
        let rehearsal = async {
            let mut tx = self.pool.begin().await?;
            let until = Instant::now() + self.settings.transaction_timeout;
            let xid = store::begin_plain(&mut tx, &by).await?;
            let (mut tx, outgoing) = match self.run_handler(handler, message, tx, until).await {
                Ok(ran) => ran,
                Err(failed) => {
                    return Ok((
                        Outcome::Failed(failed.rolled_back().await),
                        AfterCommit::default(),
                    ))
                }
            };
            let rehearsed = match still_ours(&mut tx, &xid, by.guest_role).await {
                Ok(()) => (Outcome::Processed, outgoing),
                Err(broken) => (Outcome::Failed(broken), AfterCommit::default()),
            };
            rollback(tx).await;
            Ok::<_, sqlx::Error>(rehearsed)
        };
        rehearsal.await.unwrap_or_else(|e| {
            let error = HandlerError::new(
                FailureKind::Database,
                true,
                format!("database error around the handler: {e}"),
            );
            (Outcome::Failed(error), AfterCommit::default())
        })
    }
}

/// Checks that the transaction the handler hands back is the one the runner
/// opened, can still commit, and still runs as the guest role. PostgreSQL turns
/// `COMMIT` of an aborted transaction into a silent `ROLLBACK`, so committing
/// without this check could report a message processed whose effects are gone.
async fn still_ours(tx: &mut Tx, xid: &str, guest_role: Option<&str>) -> Result<(), HandlerError> {
    let broken = |why: String| HandlerError::new(FailureKind::TransactionBroken, false, why);
    let now = store::transaction_state(tx).await.map_err(|e| {
        broken(format!(
            "the handler returned ok but its transaction cannot commit (a statement failed and \
             aborted it; the handler must not ignore db errors): {e}"
        ))
    })?;
    if now.xid.as_deref() != Some(xid) {
        return Err(broken(format!(
            "the transaction was ended or replaced during the handler (expected xid {xid}, found {})",
            now.xid.as_deref().unwrap_or("none")
        )));
    }
    let expected_user = guest_role.unwrap_or(&now.session_user);
    if now.current_user != expected_user {
        return Err(broken(format!(
            "the handler changed the transaction's role to {} (expected {expected_user})",
            now.current_user
        )));
    }
    Ok(())
}

async fn rollback(tx: Tx) {
    if let Err(e) = tx.rollback().await {
        // The connection is discarded by the pool; nothing was committed either way.
        tracing::warn!(error = %e, "rollback failed");
    }
}

/// A handler that did not succeed: why, and its transaction unless it was
/// dropped with the handler (which rolls it back).
struct HandlerFailed {
    tx: Option<Tx>,
    error: HandlerError,
}

impl HandlerFailed {
    async fn rolled_back(self) -> HandlerError {
        if let Some(tx) = self.tx {
            rollback(tx).await;
        }
        self.error
    }
}

/// How a batch transaction ended.
enum Batch {
    /// Committed; an outcome per message.
    Committed(Vec<Outcome>),
    /// Rolled back because the message at this index failed.
    FailedAt(usize, Outcome),
    /// Rolled back: another open transaction holds a message's inbox row.
    Locked,
    /// Rolled back: every handler returned ok, but the transaction could no
    /// longer commit (in a batch, which handler broke it is not known).
    Broken(HandlerError),
}

/// Past this many bytes of publications held, a batch stores them before its
/// next handler runs.
const STAGED_EARLY_BYTES: usize = 4 << 20;

/// What a batch's handlers published or requested and the runner has not
/// stored yet.
#[derive(Default)]
struct Published<'m> {
    runs: Vec<(&'m Message, AfterCommit)>,
    bytes: usize,
}

impl<'m> Published<'m> {
    fn push(&mut self, message: &'m Message, after_commit: AfterCommit) {
        if !after_commit.is_empty() {
            self.bytes += after_commit.bytes();
            self.runs.push((message, after_commit));
        }
    }
}

/// For each message, whether it is the first in the batch with its id.
fn first_occurrences(messages: &[&Message]) -> Vec<bool> {
    let mut seen = std::collections::HashSet::with_capacity(messages.len());
    messages
        .iter()
        .map(|m| seen.insert(m.message_id.as_str()))
        .collect()
}
