//! The statement check run on every guest SQL string before it reaches PostgreSQL.
//!
//! It parses with PostgreSQL's own grammar (libpg_query, through `pg_query`), so
//! quoting, comments, dollar quotes and case cannot hide a statement from it. The
//! database role remains the real guard; this one refuses early, with a message
//! the guest can act on, what a handler must never do inside the host's
//! transaction: end or change the transaction, change session state, reach
//! outside the transaction, or touch the host's own schema.
//!
//! The guard parses with PostgreSQL's default `standard_conforming_strings = on`;
//! the host's sessions must keep that default, or the server could read a string
//! literal differently from the guard.

mod denied;
mod position;
#[cfg(test)]
mod tests;
mod walk;

use pg_query::protobuf::{KeywordKind, Token};
use pg_query::NodeEnum;

/// Why a guest statement was refused: the rule's short name and a sentence for the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: &'static str,
    pub message: String,
}

/// What the check learned of a statement it admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// The statement returns rows and can be read through `WITH r AS (...)`
    /// (a SELECT, or a DML statement with RETURNING, neither with a
    /// data-modifying WITH of its own): the host then has PostgreSQL refuse a
    /// result row larger than its bound before sending it.
    pub rows_in_cte: bool,
    /// Where the statement itself is in the text (without a trailing `;`).
    pub start: usize,
    pub end: usize,
}

/// The host's own schema: guests never name it.
pub(super) const HOST_SCHEMA: &str = "inbox_host";

/// The stack of the thread a statement is checked on. PostgreSQL's parser and
/// the tree's decoding recurse as deep as the statement nests, which a guest
/// chooses: on a worker's (or a guest fiber's) stack of a few MiB, a crafted
/// statement could overflow it and abort the process. Pages are only touched
/// as deep as a check goes.
const CHECK_STACK_BYTES: usize = 256 << 20;

/// Checks one guest statement. Ok means it may run inside the inbox transaction.
///
/// Runs on a thread of its own with a deep stack (see `CHECK_STACK_BYTES`);
/// callers remember verdicts, so only statements not seen before pay for it.
pub fn check(sql: &str) -> Result<Admitted, Violation> {
    let unchecked = |why: String| {
        violation(
            "syntax",
            format!("the statement could not be checked ({why}): simplify it"),
        )
    };
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("sql-check".into())
            .stack_size(CHECK_STACK_BYTES)
            .spawn_scoped(scope, || check_here(sql))
            .map_err(|e| unchecked(e.to_string()))?
            .join()
            .unwrap_or_else(|_| Err(unchecked("the check panicked".into())))
    })
}

fn check_here(sql: &str) -> Result<Admitted, Violation> {
    let parsed = pg_query::parse(sql, 0).map_err(|e| position::syntax_violation(sql, e))?;
    let (stmt, start, len) = match parsed.protobuf.stmts.as_slice() {
        [only] => (
            only.stmt.as_ref().and_then(|n| n.node.as_ref()),
            only.stmt_location,
            only.stmt_len,
        ),
        [] => {
            return Err(violation(
                "single-statement",
                "an empty statement is not allowed: send exactly one SQL statement".into(),
            ))
        }
        many => {
            return Err(violation(
                "single-statement",
                format!(
                "{} statements were sent, and only one is allowed per call: send them one by one",
                many.len()
            ),
            ))
        }
    };
    let Some(stmt) = stmt else {
        return Err(violation(
            "syntax",
            "the statement parsed to nothing".into(),
        ));
    };
    check_kind(sql, stmt)?;
    let start = usize::try_from(start).unwrap_or(0).min(sql.len());
    let end = match usize::try_from(len) {
        Ok(0) | Err(_) => sql.len(),
        Ok(len) => (start + len).min(sql.len()),
    };
    let admitted = Admitted {
        rows_in_cte: rows_in_cte(stmt),
        start,
        end,
    };
    // A generic walk of the serialized tree reaches every node, whatever its type;
    // `pg_query`'s own `nodes()` only visits a subset (not VALUES lists or RETURNING).
    let tree = serde_json::to_value(stmt).map_err(|e| {
        violation(
            "syntax",
            format!("the parsed statement could not be inspected: {e}"),
        )
    })?;
    walk::walk(&tree).map(|()| admitted)
}

/// Whether the statement returns rows and reads the same through a CTE.
fn rows_in_cte(stmt: &NodeEnum) -> bool {
    use NodeEnum::*;
    let returning = |r: &Option<pg_query::protobuf::ReturningClause>| {
        r.as_ref().is_some_and(|r| !r.exprs.is_empty())
    };
    match stmt {
        SelectStmt(s) => s.into_clause.is_none() && !modifies_in_with(&s.with_clause),
        InsertStmt(s) => returning(&s.returning_clause) && !modifies_in_with(&s.with_clause),
        UpdateStmt(s) => returning(&s.returning_clause) && !modifies_in_with(&s.with_clause),
        DeleteStmt(s) => returning(&s.returning_clause) && !modifies_in_with(&s.with_clause),
        _ => false,
    }
}

/// A WITH holding a data-modifying statement must stay at the top level.
fn modifies_in_with(with: &Option<pg_query::protobuf::WithClause>) -> bool {
    with.iter()
        .flat_map(|w| &w.ctes)
        .any(|cte| match &cte.node {
            Some(NodeEnum::CommonTableExpr(cte)) => !matches!(
                cte.ctequery.as_deref().and_then(|q| q.node.as_ref()),
                Some(NodeEnum::SelectStmt(_))
            ),
            _ => true,
        })
}

pub(super) fn violation(rule: &'static str, message: String) -> Violation {
    Violation { rule, message }
}

/// Allows SELECT (VALUES, set operations, CTEs), INSERT, UPDATE, DELETE and MERGE.
fn check_kind(sql: &str, stmt: &NodeEnum) -> Result<(), Violation> {
    use NodeEnum::*;
    let reason = match stmt {
        SelectStmt(_) | InsertStmt(_) | UpdateStmt(_) | DeleteStmt(_) | MergeStmt(_) => {
            return Ok(())
        }
        TransactionStmt(_) => {
            return Err(violation(
                "statement-kind",
                format!(
                    "transaction control ({}) is not allowed: the host owns the transaction; \
                     return an error from the handler to roll back",
                    leading_keywords(sql)
                ),
            ))
        }
        VariableShowStmt(_) => "read a setting with SELECT current_setting('name')",
        VariableSetStmt(_) | DiscardStmt(_) | AlterSystemStmt(_) => {
            "settings and session state belong to the host, and would outlive this message"
        }
        ListenStmt(_) | UnlistenStmt(_) | NotifyStmt(_) => {
            "notifications reach other sessions; write a row instead"
        }
        CopyStmt(_) => "COPY reaches files, programs or the client connection",
        LockStmt(_) => {
            "table locks stall other consumers until the host commits; \
             lock rows with SELECT ... FOR UPDATE"
        }
        DoStmt(_) | CallStmt(_) => {
            "procedural code runs outside this check, and procedures can commit"
        }
        ExplainStmt(_) => "EXPLAIN ANALYZE executes its statement outside this check",
        PrepareStmt(_) | ExecuteStmt(_) | DeallocateStmt(_) => {
            "prepared statements are session state"
        }
        DeclareCursorStmt(_) | FetchStmt(_) | ClosePortalStmt(_) => "cursors are session state",
        _ => {
            "a handler runs only SELECT, INSERT, UPDATE, DELETE and MERGE; \
             schema changes and maintenance belong to migrations"
        }
    };
    let what = leading_keywords(sql);
    Err(violation(
        "statement-kind",
        format!("{what} is not allowed: {reason}"),
    ))
}

/// The statement's leading keywords as the guest wrote them (`END`, `SET LOCAL`,
/// `CREATE TEMP TABLE`), to name what was refused.
fn leading_keywords(sql: &str) -> String {
    let words: Vec<String> = pg_query::scan(sql)
        .map(|scan| {
            scan.tokens
                .iter()
                .filter(|t| {
                    t.token != Token::SqlComment as i32 && t.token != Token::CComment as i32
                })
                .take_while(|t| t.keyword_kind != KeywordKind::NoKeyword as i32)
                .take(3)
                .filter_map(|t| sql.get(t.start as usize..t.end as usize))
                .map(str::to_uppercase)
                .collect()
        })
        .unwrap_or_default();
    if words.is_empty() {
        "this statement".into()
    } else {
        words.join(" ")
    }
}
