//! Remembers the statement check's verdict per SQL text: a handler sends the same
//! few statements for every message, and parsing each time would cost more than
//! the lookup.

use std::collections::HashMap;
use std::sync::Mutex;

use super::sql_guard::{self, Admitted, Violation};

/// Verdicts kept, by count and by bytes of SQL text, before the memory is
/// cleared (a guest sending ever-new SQL text cannot grow it without bound).
const CAPACITY: usize = 4096;
const CAPACITY_BYTES: usize = 4 << 20;

#[derive(Debug, Default)]
pub(crate) struct CheckedStatements {
    verdicts: Mutex<Verdicts>,
}

#[derive(Debug, Default)]
struct Verdicts {
    by_sql: HashMap<String, Result<Admitted, Violation>>,
    bytes: usize,
}

impl CheckedStatements {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn check(&self, sql: &str) -> Result<Admitted, Violation> {
        if let Some(verdict) = self.lock().by_sql.get(sql) {
            return verdict.clone();
        }
        let verdict = sql_guard::check(sql);
        let mut verdicts = self.lock();
        if verdicts.by_sql.len() >= CAPACITY || verdicts.bytes + sql.len() > CAPACITY_BYTES {
            *verdicts = Verdicts::default();
        }
        verdicts.bytes += sql.len();
        verdicts.by_sql.insert(sql.to_string(), verdict.clone());
        verdict
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Verdicts> {
        self.verdicts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_nested_as_deep_as_the_size_bound_allows_are_refused_not_fatal() {
        let checks = CheckedStatements::new();
        let n = 30_000;
        for sql in [
            format!("SELECT 1{}", "+1".repeat(n)),
            format!("SELECT {}1{}", "(".repeat(n), ")".repeat(n)),
            format!("SELECT {}true", "NOT ".repeat(n / 2)),
        ] {
            assert!(checks.check(&sql).is_err());
        }
    }

    #[test]
    fn the_verdict_memory_is_bounded_in_bytes() {
        let checks = CheckedStatements::new();
        for i in 0..200 {
            let _ = checks.check(&format!("SELECT {i} /* {} */", "x".repeat(60 << 10)));
        }
        assert!(checks.lock().bytes <= CAPACITY_BYTES);
    }
}
