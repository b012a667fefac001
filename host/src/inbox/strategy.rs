use std::fmt;

/// When, relative to the transaction, the consumer's offset is committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Offset committed before the transaction starts: a failure loses the message.
    AtMostOnce,
    /// Offset committed after the transaction per [`CommitOn`]; no inbox row, so
    /// duplicates reach the handler.
    AtLeastOnce(CommitOn),
    /// Offset committed only after a successful commit; the inbox row turns
    /// duplicates and locked rows into outcomes the runner handles.
    #[default]
    ExactlyOnceInbox,
}

/// For `at-least-once`: which transaction results acknowledge the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CommitOn {
    /// After the transaction, whatever happened to it.
    Persist,
    /// Only after a successful commit.
    #[default]
    Success,
}

impl Strategy {
    /// Whether the runner inserts an inbox row (and so detects duplicates).
    pub fn uses_inbox(self) -> bool {
        self == Strategy::ExactlyOnceInbox
    }

    /// Whether the offset is committed before the transaction starts.
    pub fn commits_before(self) -> bool {
        self == Strategy::AtMostOnce
    }

    /// Whether a record with this outcome is done: at-most-once committed it
    /// before handling, at-least-once on-persist acknowledges after any
    /// transaction, and every strategy acknowledges what committed (or was set
    /// aside). The rest is retried from the same offset.
    pub fn acknowledges(self, outcome: &super::Outcome) -> bool {
        use super::Outcome::*;
        match (self, outcome) {
            (Strategy::AtMostOnce, _) => true,
            (_, Processed | Duplicate | SetAside(_)) => true,
            (Strategy::AtLeastOnce(CommitOn::Persist), Failed(_) | Locked) => true,
            (_, Failed(_) | Locked) => false,
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Strategy::AtMostOnce => "at-most-once",
            Strategy::AtLeastOnce(CommitOn::Persist) => "at-least-once (commit on-persist)",
            Strategy::AtLeastOnce(CommitOn::Success) => "at-least-once (commit on-success)",
            Strategy::ExactlyOnceInbox => "exactly-once-inbox",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{FailureKind, HandlerError, Outcome};
    use super::*;

    #[test]
    fn only_the_strategies_that_promise_it_acknowledge_a_failure() {
        let failed = Outcome::Failed(HandlerError::new(FailureKind::Panic, false, "x"));
        let table = [
            (Strategy::AtMostOnce, [true, true, true, true]),
            (
                Strategy::AtLeastOnce(CommitOn::Persist),
                [true, true, true, true],
            ),
            (
                Strategy::AtLeastOnce(CommitOn::Success),
                [true, true, false, false],
            ),
            (Strategy::ExactlyOnceInbox, [true, true, false, false]),
        ];
        for (strategy, expected) in table {
            let got = [
                Outcome::Processed,
                Outcome::Duplicate,
                failed.clone(),
                Outcome::Locked,
            ]
            .map(|o| strategy.acknowledges(&o));
            assert_eq!(got, expected, "{strategy}");
        }
        assert!(Strategy::AtMostOnce.commits_before());
        assert!(Strategy::default().uses_inbox());
    }
}
