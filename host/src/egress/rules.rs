//! `--http-allow`: what a guest may reach. Nothing by default; each rule is an
//! origin or a URL prefix (`https://api.example.com`, `https://api.example.com/v1/`),
//! https unless the rule says http. A rule whose host is an IP address names
//! that address literally, which is the only way to reach a loopback, private
//! or link-local address (`addresses.rs`).

use std::net::IpAddr;

use url::{Host, Url};

/// One `--http-allow` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    scheme: String,
    host: String,
    port: u16,
    /// The path a URL must start with (`/` for a whole origin).
    path: String,
    text: String,
}

impl Rule {
    /// Parses a rule, or says what is wrong with it and how to write one.
    pub fn parse(text: &str) -> Result<Self, String> {
        let example = "e.g. --http-allow https://api.example.com or https://api.example.com/v1/";
        let url = Url::parse(text.trim())
            .map_err(|e| format!("--http-allow {text:?} is not a URL ({e}); {example}"))?;
        if !matches!(url.scheme(), "https" | "http") {
            return Err(format!(
                "--http-allow {text:?}: only https and http are sent; {example}"
            ));
        }
        if !url.username().is_empty()
            || url.password().is_some()
            || url.query().is_some()
            || url.fragment().is_some()
        {
            return Err(format!(
                "--http-allow {text:?}: a rule is an origin or a path prefix, without credentials, query or fragment"
            ));
        }
        let host = match url.host() {
            Some(Host::Domain(d)) => d.to_ascii_lowercase(),
            Some(Host::Ipv4(ip)) => ip.to_string(),
            Some(Host::Ipv6(ip)) => ip.to_string(),
            None => return Err(format!("--http-allow {text:?} names no host; {example}")),
        };
        Ok(Self {
            scheme: url.scheme().to_string(),
            port: url.port_or_known_default().unwrap_or(443),
            host,
            path: url.path().to_string(),
            text: text.trim().to_string(),
        })
    }

    pub(super) fn allows(&self, url: &Url) -> bool {
        url.scheme() == self.scheme
            && host_of(url).as_deref() == Some(self.host.as_str())
            && url.port_or_known_default() == Some(self.port)
            && path_within(url.path(), &self.path)
    }

    /// The address this rule names literally, if its host is one.
    fn literal(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }
}

/// A URL's path is within a rule's when it is the same, or below it: `/v1`
/// allows `/v1` and `/v1/charges`, not `/v10`.
fn path_within(path: &str, prefix: &str) -> bool {
    prefix == "/"
        || path == prefix
        || (path.starts_with(prefix)
            && (prefix.ends_with('/') || path[prefix.len()..].starts_with('/')))
}

/// A URL's host as rules spell it (lower case; IPv6 without brackets).
fn host_of(url: &Url) -> Option<String> {
    match url.host()? {
        Host::Domain(d) => Some(d.to_ascii_lowercase()),
        Host::Ipv4(ip) => Some(ip.to_string()),
        Host::Ipv6(ip) => Some(ip.to_string()),
    }
}

/// Every `--http-allow` rule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    rules: Vec<Rule>,
}

impl AllowList {
    pub fn new(rules: Vec<Rule>) -> Self {
        Self { rules }
    }

    /// Parses every rule, or says what is wrong with each bad one.
    pub fn parse(texts: &[String]) -> Result<Self, Vec<String>> {
        let (rules, bad): (Vec<_>, Vec<_>) = texts
            .iter()
            .filter(|t| !t.trim().is_empty())
            .map(|t| Rule::parse(t))
            .partition(Result::is_ok);
        if bad.is_empty() {
            Ok(Self::new(rules.into_iter().flatten().collect()))
        } else {
            Err(bad.into_iter().filter_map(Result::err).collect())
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The URL parsed, if a rule allows it; otherwise what is wrong and the flag.
    pub fn check(&self, url: &str) -> Result<Url, String> {
        let parsed =
            Url::parse(url).map_err(|e| format!("{url:?} is not an absolute URL ({e})"))?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(format!(
                "{url:?} carries credentials; pass them in a header (a secret, docs/effects.md)"
            ));
        }
        if self.rules.iter().any(|r| r.allows(&parsed)) {
            return Ok(parsed);
        }
        let allowed = match self.rules.as_slice() {
            [] => "none".to_string(),
            rules => rules
                .iter()
                .map(|r| r.text.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        };
        let origin = parsed.origin().ascii_serialization();
        Err(format!(
            "{url:?} is not allowed (allowed: {allowed}); start the host with --http-allow {origin} to allow its origin"
        ))
    }

    /// Whether a rule names `ip` literally (and so may reach it, whatever it is).
    pub fn names_literally(&self, ip: IpAddr) -> bool {
        self.rules.iter().any(|r| r.literal() == Some(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(rules: &[&str]) -> AllowList {
        AllowList::parse(&rules.iter().map(|r| r.to_string()).collect::<Vec<_>>()).expect("rules")
    }

    #[test]
    fn a_rule_allows_its_origin_or_what_lies_below_its_path() {
        let allow = list(&[
            "https://api.example.com",
            "https://hooks.example.org/v1",
            "http://127.0.0.1:8080",
        ]);
        for ok in [
            "https://api.example.com/charges?x=1",
            "https://API.example.com:443/",
            "https://hooks.example.org/v1",
            "https://hooks.example.org/v1/orders",
            "http://127.0.0.1:8080/notify",
        ] {
            assert!(allow.check(ok).is_ok(), "{ok}");
        }
        for refused in [
            "http://api.example.com/charges",
            "https://api.example.com:8443/",
            "https://evil.example.com/",
            "https://api.example.com.evil.net/",
            "https://hooks.example.org/v10",
            "https://hooks.example.org/",
            "http://127.0.0.1:8081/",
            "https://user:pw@api.example.com/",
            "not a url",
        ] {
            assert!(allow.check(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn nothing_is_allowed_by_default_and_the_refusal_names_the_flag() {
        let refused = AllowList::default()
            .check("https://api.example.com/x")
            .unwrap_err();
        assert!(refused.contains("allowed: none"), "{refused}");
        assert!(
            refused.contains("--http-allow https://api.example.com"),
            "{refused}"
        );
    }

    #[test]
    fn bad_rules_are_refused_with_an_example() {
        let bad = AllowList::parse(&[
            "ftp://x".into(),
            "https://a.example/?q".into(),
            "nope".into(),
        ])
        .unwrap_err();
        assert_eq!(bad.len(), 3, "{bad:?}");
        assert!(bad.iter().all(|b| b.contains("--http-allow")), "{bad:?}");
    }

    #[test]
    fn only_a_rule_with_an_address_names_it_literally() {
        let allow = list(&[
            "http://127.0.0.1:8080",
            "https://localhost",
            "http://[::1]:9000",
        ]);
        assert!(allow.names_literally("127.0.0.1".parse().expect("ip")));
        assert!(allow.names_literally("::1".parse().expect("ip")));
        assert!(!allow.names_literally("127.0.0.2".parse().expect("ip")));
    }
}
