use std::time::Duration;

use sqlx::PgPool;

use super::store::{self, Claim, ClaimBy};
use super::{FailureKind, Handler, HandlerError, Message, Outcome, Strategy, Tx};

/// How the runner claims messages and bounds their transactions.
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    pub group: String,
    pub worker_id: String,
    pub strategy: Strategy,
    /// How long to wait for another transaction holding the same inbox row.
    pub lock_timeout: Duration,
    /// The longest any single statement (host's or guest's) may run.
    pub statement_timeout: Duration,
    /// The least-privileged role handler statements run under; `None` runs them
    /// as the host's own login (only for trusted native handlers).
    pub guest_role: Option<String>,
}

/// Runs one message at a time through begin → inbox row → handler → commit.
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
        match self.try_process(message, handler).await {
            Ok(outcome) => outcome,
            Err(e) => Outcome::Failed(HandlerError::new(
                FailureKind::Database,
                true,
                format!("database error around the handler: {e}"),
            )),
        }
    }

    async fn try_process<H: Handler>(
        &self,
        message: &Message,
        handler: &H,
    ) -> Result<Outcome, sqlx::Error> {
        let by = ClaimBy {
            group: &self.settings.group,
            worker_id: &self.settings.worker_id,
            version: handler.version(),
            lock_timeout: self.settings.lock_timeout,
            statement_timeout: self.settings.statement_timeout,
            guest_role: self.settings.guest_role.as_deref(),
        };
        let mut tx = self.pool.begin().await?;
        let xid = if self.settings.strategy.uses_inbox() {
            match store::claim(&mut tx, message, &by).await? {
                Claim::New { xid } => xid,
                Claim::Duplicate => return finish_without_handler(tx, Outcome::Duplicate).await,
                Claim::Locked => return finish_without_handler(tx, Outcome::Locked).await,
            }
        } else {
            store::begin_plain(&mut tx, &by).await?
        };

        let (mut tx, verdict) = handler.handle(message, tx).await;
        if let Err(error) = verdict {
            rollback(tx).await;
            return Ok(Outcome::Failed(error));
        }
        if let Err(broken) = still_ours(&mut tx, &xid, by.guest_role).await {
            rollback(tx).await;
            return Ok(Outcome::Failed(broken));
        }
        tx.commit().await?;
        Ok(Outcome::Processed)
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

async fn finish_without_handler(tx: Tx, outcome: Outcome) -> Result<Outcome, sqlx::Error> {
    tx.rollback().await?;
    Ok(outcome)
}

async fn rollback(tx: Tx) {
    if let Err(e) = tx.rollback().await {
        // The connection is discarded by the pool; nothing was committed either way.
        tracing::warn!(error = %e, "rollback failed");
    }
}
