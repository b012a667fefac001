use std::fmt;
use std::str::FromStr;

use super::RecordHeader;

/// One place a message id may come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdSource {
    /// A record header with this name (UTF-8 value).
    Header(String),
    /// A top-level string or integer field of a JSON object payload.
    JsonField(String),
    /// `topic:partition:offset`: always present, but a republished message gets a
    /// new one, so duplicates from an upstream relay are not caught.
    Coordinates,
}

/// Sources tried in order; the first that yields an id wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdSources(pub Vec<IdSource>);

impl Default for IdSources {
    fn default() -> Self {
        Self(vec![
            IdSource::Header("message_id".into()),
            IdSource::Header("event_id".into()),
            IdSource::JsonField("event_id".into()),
            IdSource::Coordinates,
        ])
    }
}

impl IdSources {
    /// The id and the source it came from, or why there is none.
    pub(super) fn extract(
        &self,
        headers: &[RecordHeader],
        payload: &[u8],
        coordinates: impl Fn() -> String,
    ) -> Result<(String, &IdSource), String> {
        let mut json: Option<Option<serde_json::Value>> = None;
        for source in &self.0 {
            let found = match source {
                IdSource::Header(name) => headers
                    .iter()
                    .find(|h| &h.key == name)
                    .and_then(|h| h.value.as_deref())
                    .and_then(|v| std::str::from_utf8(v).ok())
                    .map(str::to_owned),
                IdSource::JsonField(field) => json
                    .get_or_insert_with(|| serde_json::from_slice(payload).ok())
                    .as_ref()
                    .and_then(|v| v.get(field))
                    .and_then(|v| match v {
                        serde_json::Value::String(s) => Some(s.clone()),
                        serde_json::Value::Number(n) => Some(n.to_string()),
                        _ => None,
                    }),
                IdSource::Coordinates => Some(coordinates()),
            };
            if let Some(id) = found.filter(|id| !id.trim().is_empty()) {
                return usable(id, source).map(|id| (id, source));
            }
        }
        Err(format!("no message id found (tried {self})"))
    }
}

/// The longest message id the inbox keeps (its key must fit a btree index entry).
pub const MAX_MESSAGE_ID_BYTES: usize = 1024;

/// An id PostgreSQL `text` cannot hold, or too long for the inbox key, makes the
/// record unusable (it is set aside) rather than failing its claim for ever.
fn usable(id: String, source: &IdSource) -> Result<String, String> {
    if id.contains('\0') {
        return Err(format!(
            "the message id from {source} contains a NUL byte, which PostgreSQL text cannot hold"
        ));
    }
    if id.len() > MAX_MESSAGE_ID_BYTES {
        return Err(format!(
            "the message id from {source} is {} bytes long (at most {MAX_MESSAGE_ID_BYTES})",
            id.len()
        ));
    }
    Ok(id)
}

impl fmt::Display for IdSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdSource::Header(h) => write!(f, "header:{h}"),
            IdSource::JsonField(j) => write!(f, "json:{j}"),
            IdSource::Coordinates => f.write_str("coordinates"),
        }
    }
}

impl fmt::Display for IdSources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&names.join(","))
    }
}

impl FromStr for IdSources {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let sources = s
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|part| match part.split_once(':') {
                Some(("header", name)) if !name.is_empty() => Ok(IdSource::Header(name.into())),
                Some(("json", field)) if !field.is_empty() => Ok(IdSource::JsonField(field.into())),
                None if part == "coordinates" => Ok(IdSource::Coordinates),
                _ => Err(format!(
                    "unknown message id source `{part}`: use header:<name>, json:<field> or coordinates, \
                     comma-separated in order of preference"
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if sources.is_empty() {
            return Err(
                "no message id source given: use e.g. header:message_id,coordinates".into(),
            );
        }
        Ok(Self(sources))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(key: &str, value: &str) -> RecordHeader {
        RecordHeader {
            key: key.into(),
            value: Some(value.as_bytes().to_vec()),
        }
    }

    #[test]
    fn an_id_with_a_nul_byte_or_too_long_is_refused_not_replaced() {
        let sources: IdSources = "header:id,coordinates".parse().unwrap();
        let nul = sources.extract(&[header("id", "a\0b")], b"", || "t-0-1".into());
        assert!(nul.unwrap_err().contains("NUL byte"));
        let long = "x".repeat(MAX_MESSAGE_ID_BYTES + 1);
        let too_long = sources.extract(&[header("id", &long)], b"", || "t-0-1".into());
        assert!(too_long.unwrap_err().contains("1025 bytes long"));
    }

    #[test]
    fn header_wins_over_json_field_and_coordinates() {
        let sources = IdSources::default();
        let (id, _) = sources
            .extract(
                &[header("event_id", "e-1"), header("message_id", "m-1")],
                br#"{"event_id":"j"}"#,
                || "t:0:1".into(),
            )
            .unwrap();
        assert_eq!(id, "m-1");
    }

    #[test]
    fn json_field_is_used_when_no_header_carries_an_id() {
        let sources = IdSources::default();
        let (id, source) = sources
            .extract(&[], br#"{"event_id": 42}"#, || "t:0:1".into())
            .unwrap();
        assert_eq!(
            (id.as_str(), source),
            ("42", &IdSource::JsonField("event_id".into()))
        );
    }

    #[test]
    fn without_coordinates_a_record_with_no_id_is_an_error_naming_the_sources() {
        let sources: IdSources = "header:message_id,json:id".parse().unwrap();
        let err = sources
            .extract(&[], b"not json", || "t:0:1".into())
            .unwrap_err();
        assert!(err.contains("header:message_id,json:id"), "{err}");
    }

    #[test]
    fn unknown_source_is_refused_with_the_accepted_forms() {
        let err = "header:x,bogus".parse::<IdSources>().unwrap_err();
        assert!(
            err.contains("header:<name>, json:<field> or coordinates"),
            "{err}"
        );
    }
}
