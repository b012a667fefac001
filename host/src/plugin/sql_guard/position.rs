//! Where a syntax error is, as PostgreSQL would report it: `pg_query` drops the
//! parser's cursor position, so it is found again from the error's token.

use super::{violation, Violation};

/// The parser's message, with the 1-based character position PostgreSQL would
/// report (`pg_query` drops libpg_query's cursor position, so it is found again).
pub(super) fn syntax_violation(sql: &str, error: pg_query::Error) -> Violation {
    let message = match error {
        pg_query::Error::Parse(m) | pg_query::Error::Scan(m) => m,
        pg_query::Error::Conversion(_) => "the statement contains a NUL byte".into(),
        // prost refuses trees over 100 messages deep (about 50 nested expressions).
        pg_query::Error::Decode(_) => "the statement is nested too deeply to check".into(),
        other => other.to_string(),
    };
    let at = error_offset(sql, &message)
        .map(|byte| format!(" (at character {})", sql[..byte].chars().count() + 1));
    violation(
        "syntax",
        format!(
            "PostgreSQL cannot parse the statement: {message}{}",
            at.unwrap_or_default()
        ),
    )
}

/// Byte offset of the token a `... at or near "X"` / `... at end of input` error names.
fn error_offset(sql: &str, message: &str) -> Option<usize> {
    if message.ends_with("at end of input") {
        return Some(sql.len());
    }
    let near = message.split_once(" at or near \"")?.1.strip_suffix('"')?;
    let candidates: Vec<usize> = match pg_query::scan(sql) {
        Ok(scan) => scan
            .tokens
            .iter()
            .filter(|t| sql.get(t.start as usize..t.end as usize) == Some(near))
            .map(|t| t.start as usize)
            .collect(),
        Err(_) => sql.match_indices(near).map(|(i, _)| i).collect(),
    };
    // When the token occurs more than once, the first one whose prefix fails the
    // same way is where the parser stopped: a shorter prefix only runs out of input,
    // a longer one stops there too. So the answer is a partition point, found
    // with a logarithmic number of parses (a linear search made a statement
    // repeating the token take seconds to refuse).
    // The parser alone (no tree built and decoded) answers the question.
    let fails_here = |start: &usize| {
        let prefix = sql.get(..start + near.len()).unwrap_or(sql);
        matches!(pg_query::split_with_parser(prefix), Err(pg_query::Error::Split(m)) if m == message)
    };
    match candidates.as_slice() {
        [only] => Some(*only),
        _ => {
            let at = candidates.partition_point(|start| !fails_here(start));
            candidates.get(at).copied()
        }
    }
}
