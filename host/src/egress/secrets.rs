//! Secrets the guest never sees: `--http-secret NAME=env:VAR@RULE` reads VAR
//! once at start; a header value that says `{{secret:NAME}}` gets the value put
//! in by the gate as it sends, and only to a URL that RULE (an `--http-allow`
//! style rule) allows. The value is never handed to the guest, logged, traced,
//! or stored: requests after commit are stored with the reference.

use std::borrow::Cow;
use std::fmt;

use url::Url;

use super::rules::Rule;

const OPEN: &str = "{{secret:";
const CLOSE: &str = "}}";

/// One secret and the rule it is bound to.
struct Secret {
    name: String,
    value: String,
    rule: Rule,
    rule_text: String,
}

/// Every `--http-secret`.
#[derive(Default)]
pub struct Secrets(Vec<Secret>);

/// Names and rules only: a value never reaches a log through `{:?}`.
impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(
                self.0
                    .iter()
                    .map(|s| format!("{} for {}", s.name, s.rule_text)),
            )
            .finish()
    }
}

impl Secrets {
    /// Parses `NAME=env:VAR@RULE` flags, reading each VAR with `env`; every
    /// problem is reported, each saying what to pass.
    pub fn parse(
        texts: &[String],
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, Vec<String>> {
        let (mut secrets, mut problems) = (Vec::new(), Vec::new());
        for text in texts.iter().map(|t| t.trim()).filter(|t| !t.is_empty()) {
            match parse_one(text, &env) {
                Ok(secret) if secrets.iter().any(|s: &Secret| s.name == secret.name) => problems
                    .push(format!(
                        "--http-secret {}: the name is given twice",
                        secret.name
                    )),
                Ok(secret) => secrets.push(secret),
                Err(why) => problems.push(format!("--http-secret {text:?}: {why}")),
            }
        }
        if problems.is_empty() {
            Ok(Self(secrets))
        } else {
            Err(problems)
        }
    }

    /// `value` with every `{{secret:NAME}}` replaced, if each NAME is a secret
    /// whose rule allows `url`; otherwise which one is refused and why (the
    /// reason names the secret, never its value).
    pub fn fill<'a>(&self, url: &str, value: &'a str) -> Result<Cow<'a, str>, String> {
        if !value.contains(OPEN) {
            return Ok(Cow::Borrowed(value));
        }
        let parsed =
            Url::parse(url).map_err(|e| format!("{url:?} is not an absolute URL ({e})"))?;
        let (mut filled, mut rest) = (String::with_capacity(value.len()), value);
        while let Some(at) = rest.find(OPEN) {
            filled.push_str(&rest[..at]);
            let after = &rest[at + OPEN.len()..];
            let end = after
                .find(CLOSE)
                .ok_or("a header holds `{{secret:` without its closing `}}`")?;
            let name = &after[..end];
            let secret = self.0.iter().find(|s| s.name == name).ok_or_else(|| {
                format!("a header names secret {name:?}, which no --http-secret defines")
            })?;
            if !secret.rule.allows(&parsed) {
                return Err(format!(
                    "secret {name} may be sent only to {} (its --http-secret rule), not to {url}",
                    secret.rule_text
                ));
            }
            filled.push_str(&secret.value);
            rest = &after[end + CLOSE.len()..];
        }
        filled.push_str(rest);
        Ok(Cow::Owned(filled))
    }
}

fn parse_one(text: &str, env: &impl Fn(&str) -> Option<String>) -> Result<Secret, String> {
    const FORM: &str = "give NAME=env:VAR@RULE, e.g. STRIPE=env:STRIPE_KEY@https://api.stripe.com";
    let (name, source) = text.split_once('=').ok_or(FORM)?;
    let (source, rule_text) = source.split_once('@').ok_or(FORM)?;
    let var = source.strip_prefix("env:").ok_or(FORM)?;
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    if !name_ok(name) || !name_ok(var) {
        return Err(format!("names are letters, digits, _ and - ({FORM})"));
    }
    let value = env(var).ok_or_else(|| format!("the environment variable {var} is not set"))?;
    if value.is_empty() || value.bytes().any(|b| b < 0x20 && b != b'\t' || b == 0x7f) {
        return Err(format!(
            "{var} is empty or holds a control character: it could not be a header value"
        ));
    }
    let rule = Rule::parse(rule_text)?;
    Ok(Secret {
        name: name.to_string(),
        value,
        rule,
        rule_text: rule_text.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets(flags: &[&str]) -> Result<Secrets, Vec<String>> {
        let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
        Secrets::parse(&flags, |var| {
            (var == "KEY").then(|| "sk_live_1".to_string())
        })
    }

    #[test]
    fn a_secret_is_put_in_only_for_its_rule() {
        let s = secrets(&["PAY=env:KEY@https://pay.example.com/v1/"]).unwrap();
        let filled = s.fill(
            "https://pay.example.com/v1/charges",
            "Bearer {{secret:PAY}}",
        );
        assert_eq!(filled.unwrap(), "Bearer sk_live_1");
        let elsewhere = s
            .fill(
                "https://evil.example.com/v1/charges",
                "Bearer {{secret:PAY}}",
            )
            .unwrap_err();
        assert!(
            elsewhere.contains("only to https://pay.example.com/v1/"),
            "{elsewhere}"
        );
        assert!(!elsewhere.contains("sk_live_1"));
        assert!(s
            .fill("https://pay.example.com/v2/x", "{{secret:PAY}}")
            .is_err());
        assert!(s
            .fill("https://pay.example.com/v1/x", "{{secret:OTHER}}")
            .unwrap_err()
            .contains("no --http-secret defines"));
        assert!(s
            .fill("https://pay.example.com/v1/x", "{{secret:PAY")
            .is_err());
        assert_eq!(s.fill("https://x.example.com/", "plain").unwrap(), "plain");
        assert!(!format!("{s:?}").contains("sk_live_1"));
    }

    #[test]
    fn bad_flags_say_what_to_give() {
        let problems =
            secrets(&["PAY", "PAY=env:MISSING@https://a.example.com", "P=KEY@x"]).unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("NAME=env:VAR@RULE"));
        assert!(problems[1].contains("MISSING is not set"));
        assert!(secrets(&[
            "A=env:KEY@https://a.example.com",
            "A=env:KEY@https://b.example.com"
        ])
        .is_err());
    }
}
