//! Remembers the statement check's verdict per SQL text: a handler sends the same
//! few statements for every message, and parsing each time would cost more than
//! the lookup.

use std::collections::HashMap;
use std::sync::Mutex;

use super::sql_guard::{self, Violation};

/// Verdicts kept before the memory is cleared (a guest sending ever-new SQL text
/// cannot grow it without bound).
const CAPACITY: usize = 4096;

#[derive(Debug)]
pub(crate) struct CheckedStatements {
    enabled: bool,
    verdicts: Mutex<HashMap<String, Result<(), Violation>>>,
}

impl CheckedStatements {
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled,
            verdicts: Mutex::new(HashMap::new()),
        }
    }

    pub fn check(&self, sql: &str) -> Result<(), Violation> {
        if !self.enabled {
            return Ok(());
        }
        if let Some(verdict) = self.lock().get(sql) {
            return verdict.clone();
        }
        let verdict = sql_guard::check(sql);
        let mut verdicts = self.lock();
        if verdicts.len() >= CAPACITY {
            verdicts.clear();
        }
        verdicts.insert(sql.to_string(), verdict.clone());
        verdict
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Result<(), Violation>>> {
        self.verdicts.lock().unwrap_or_else(|e| e.into_inner())
    }
}
