//! The rules for what a guest hands the host to store and send after its
//! transaction commits (outbox messages now, requests after commit next): the
//! headers it may set, the bytes one record's run may hand over, and how its
//! refusals are logged. One place, so every such capability refuses the same
//! things with the same words.

use crate::inbox::storable_text;

/// A header a guest may not set: a NUL anywhere (the outbox stores headers in
/// `jsonb`, which has no `\u0000`), a value that is not UTF-8 text, and a name
/// a downstream reader could take for one the host sets: `reserved` names and
/// names starting with `reserved_prefixes`, compared as many readers compare
/// them (ASCII case and surrounding whitespace ignored, `-` and `_` alike).
/// Returns what is wrong, naming the header.
pub(crate) fn check_header(
    name: &str,
    value: Option<&[u8]>,
    reserved: &[&str],
    reserved_prefixes: &[&str],
) -> Result<(), String> {
    // Named as Rust's Debug shows it: quoted, control characters escaped.
    let shown: String = name.chars().take(128).collect();
    if name.contains('\0') {
        return Err(format!(
            "header name {shown:?} holds a NUL character, which cannot be stored"
        ));
    }
    let spelled = normalized(name);
    if let Some(host) = reserved.iter().find(|r| normalized(r) == spelled) {
        return Err(format!(
            "header {shown:?} is the host's {host:?} (names are compared ignoring case, \
             surrounding spaces and -/_); leave it out"
        ));
    }
    if let Some(prefix) = reserved_prefixes
        .iter()
        .find(|p| spelled.starts_with(&normalized(p)))
    {
        return Err(format!(
            "header {shown:?} starts with {prefix:?}, which the host reserves for its own \
             headers; choose another name"
        ));
    }
    let Some(value) = value else { return Ok(()) };
    match std::str::from_utf8(value) {
        Err(_) => Err(format!(
            "the value of header {shown:?} is not UTF-8 text (headers are stored as text); \
             encode binary values, e.g. as base64"
        )),
        Ok(text) if text.contains('\0') => Err(format!(
            "the value of header {shown:?} holds a NUL character, which cannot be stored; \
             encode binary values, e.g. as base64"
        )),
        Ok(_) => Ok(()),
    }
}

/// A header name as readers that are lenient about spelling see it.
fn normalized(name: &str) -> String {
    name.trim()
        .chars()
        .map(|c| match c {
            '_' => '-',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// The bytes one record's run may hand over in all (`--max-publish-bytes`):
/// what bounds the host's memory per record, since everything handed over is
/// held until the transaction stores it.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    max: usize,
    used: usize,
}

impl Budget {
    pub fn new(max: usize) -> Self {
        Self { max, used: 0 }
    }

    /// Takes `bytes` from the budget, or says (without taking them) that they
    /// would pass it.
    pub fn spend(&mut self, bytes: usize) -> Result<(), usize> {
        let total = self.used.saturating_add(bytes);
        if total > self.max {
            return Err(total);
        }
        self.used = total;
        Ok(())
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn reset(&mut self) {
        self.used = 0;
    }
}

/// Refusals logged whole per message, and the bytes of each kept in the log.
const LOGGED_REFUSALS: u32 = 3;
const LOGGED_TEXT_BYTES: usize = 512;

/// One message's refusals of one kind (statements, publications): the first
/// few are logged whole (bounded), the rest counted and summed up once when the
/// message ends, so a guest refused in a loop cannot flood the log.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    count: u32,
}

impl Refusals {
    /// Counts a refusal of a guest `what` ("statement", "publication").
    pub fn note(&mut self, what: &str, code: &str, text: &str) {
        self.count = self.count.saturating_add(1);
        if self.count <= LOGGED_REFUSALS {
            tracing::warn!(
                code,
                "guest {what} refused: {}",
                storable_text(text, LOGGED_TEXT_BYTES)
            );
        }
    }

    /// Refusals counted but not logged.
    pub fn unlogged(&self) -> u32 {
        self.count.saturating_sub(LOGGED_REFUSALS)
    }

    pub fn reset(&mut self) {
        self.count = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESERVED: &[&str] = &["message_id", "inbox-caused-by", "traceparent"];
    const PREFIXES: &[&str] = &["kafka_dlt-", "inbox_host-"];

    fn check(name: &str, value: &str) -> Result<(), String> {
        check_header(name, Some(value.as_bytes()), RESERVED, PREFIXES)
    }

    #[test]
    fn reserved_names_are_refused_however_they_are_spelled() {
        for name in [
            "message_id",
            "Message_Id",
            "MESSAGE_ID",
            "message_id ",
            " message-id",
            "Traceparent",
            "Inbox-Caused-By",
            "inbox_caused_by",
            "kafka_dlt-original-topic",
            "KAFKA-DLT-exception-message",
            "inbox_host-attempts",
            "Inbox-Host-Plugin-Digest",
        ] {
            let refused = check(name, "x").expect_err(name);
            assert!(
                refused.contains(&format!("{name:?}")),
                "names the header: {refused}"
            );
        }
        for name in [
            "message",
            "event-type",
            "trace",
            "kafka-dltx",
            "inbox-hostname",
        ] {
            assert_eq!(check(name, "x"), Ok(()), "{name}");
        }
    }

    #[test]
    fn a_nul_anywhere_and_a_value_that_is_not_text_are_refused() {
        assert!(check("bin\0ary", "x").unwrap_err().contains("NUL"));
        assert!(check("event-type", "a\0b").unwrap_err().contains("NUL"));
        let not_text = check_header("event-type", Some(&[0xff, 0xfe]), RESERVED, PREFIXES);
        assert!(not_text.unwrap_err().contains("not UTF-8"));
        assert_eq!(check_header("event-type", None, RESERVED, PREFIXES), Ok(()));
    }

    #[test]
    fn the_budget_refuses_the_call_that_crosses_it_and_keeps_what_was_spent() {
        let mut budget = Budget::new(10);
        assert_eq!(budget.spend(6), Ok(()));
        assert_eq!(budget.spend(5), Err(11));
        assert_eq!(budget.spend(4), Ok(()), "the refused bytes were not taken");
        assert_eq!(budget.spend(1), Err(11));
        budget.reset();
        assert_eq!(budget.spend(10), Ok(()));
    }
}
