//! The gate's HTTP client: every request to the outside goes through
//! [`Gate::send`], which applies the allow-list, connects only to addresses
//! that pass the address check (resolved once, by [`GuardedResolver`]), follows
//! no redirect, bounds the time per request and the response it reads, and
//! speaks TLS with rustls (the system's roots, plus `--http-ca`).

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use url::{Host, Url};

use super::addresses::{self, GuardedResolver};
use super::stats::{origin_of, Purpose, Stats};
use super::{AllowList, Secrets};

/// What the gate allows and how long it waits.
#[derive(Debug, Clone)]
pub struct GateSettings {
    pub allow: Arc<AllowList>,
    /// The longest one request may take, connection included (`--http-timeout-ms`).
    pub timeout: Duration,
    /// The most response bytes read (`--http-max-response-bytes`): the rest is cut.
    pub max_response_bytes: usize,
    /// A PEM file of extra certificate authorities (`--http-ca`).
    pub extra_ca: Option<PathBuf>,
    /// `--http-secret`s, put into header values as the request is sent.
    pub secrets: Arc<Secrets>,
}

impl Default for GateSettings {
    fn default() -> Self {
        Self {
            allow: Arc::default(),
            timeout: Duration::from_secs(10),
            max_response_bytes: 1 << 20,
            extra_ca: None,
            secrets: Arc::default(),
        }
    }
}

/// One request as the gate sends it.
#[derive(Debug)]
pub struct Call<'a> {
    pub method: &'a str,
    pub url: &'a str,
    pub headers: Vec<(&'a str, &'a str)>,
    pub body: &'a [u8],
    pub idempotency_key: &'a str,
    pub purpose: Purpose,
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The body, up to the gate's bound.
    pub body: Vec<u8>,
    /// Whether the body went on past the bound (the rest was not read).
    pub truncated: bool,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Why no answer came back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// A rule refused the request before anything was sent; sending again meets
    /// the same rule.
    #[error("refused: {0}")]
    Refused(String),
    /// The connection failed or the time ran out: trying again may succeed.
    #[error("no answer: {0}")]
    NoAnswer(String),
}

/// The one way out.
pub struct Gate {
    settings: GateSettings,
    client: reqwest::Client,
    stats: Stats,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Gate {
    pub fn new(settings: GateSettings) -> Result<Self, String> {
        let tls = tls_config(settings.extra_ca.as_deref())?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .dns_resolver(GuardedResolver {
                allow: settings.allow.clone(),
            })
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| format!("the HTTP client could not be built: {e}"))?;
        Ok(Self {
            settings,
            client,
            stats: Stats::default(),
        })
    }

    pub fn allow(&self) -> &AllowList {
        &self.settings.allow
    }

    /// The longest one request may take (`--http-timeout-ms`).
    pub fn timeout(&self) -> Duration {
        self.settings.timeout
    }

    /// The URL parsed, if the rules allow it and its host, where it is an
    /// address, may be reached; otherwise what is wrong and how to allow it.
    pub fn check_url(&self, url: &str) -> Result<Url, String> {
        check_url(&self.settings.allow, url)
    }

    /// What went through this gate, per origin.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Sends `call` with its `Idempotency-Key` and reads the answer, counted
    /// under its origin.
    pub async fn send(&self, call: &Call<'_>) -> Result<Answer, Failure> {
        let started = Instant::now();
        let sent = self.send_uncounted(call).await;
        let (status, refused) = match &sent {
            Ok(answer) => (Some(answer.status), false),
            Err(Failure::NoAnswer(_)) => (None, false),
            Err(Failure::Refused(_)) => (None, true),
        };
        let origin = origin_of(call.url);
        (self.stats).ended(&origin, call.purpose, status, refused, started.elapsed());
        sent
    }

    async fn send_uncounted(&self, call: &Call<'_>) -> Result<Answer, Failure> {
        let url = self.check_url(call.url).map_err(Failure::Refused)?;
        // A name whose every address is refused is refused for good here; the
        // connection itself resolves through the same check (GuardedResolver),
        // so an answer that changed since goes nowhere it should not.
        if let Some(Host::Domain(name)) = url.host() {
            addresses::vetted(name, &self.settings.allow)
                .await
                .map_err(|why| why.map_or_else(Failure::NoAnswer, Failure::Refused))?;
        }
        let method = reqwest::Method::from_bytes(call.method.as_bytes())
            .map_err(|_| Failure::Refused(format!("{:?} is not an HTTP method", call.method)))?;
        let mut request = self
            .client
            .request(method, url)
            .header("idempotency-key", call.idempotency_key)
            .body(call.body.to_vec());
        for (name, value) in &call.headers {
            let filled = self
                .settings
                .secrets
                .fill(call.url, value)
                .map_err(Failure::Refused)?;
            let mut header = reqwest::header::HeaderValue::from_str(&filled)
                .map_err(|_| Failure::Refused(format!("header {name} is not a valid value")))?;
            // Kept out of the HTTP stack's debug output.
            header.set_sensitive(matches!(filled, std::borrow::Cow::Owned(_)));
            request = request.header(*name, header);
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| Failure::NoAnswer(error_chain(&e)))?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let (mut body, mut truncated) = (Vec::new(), false);
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let room = self.settings.max_response_bytes - body.len();
                    if chunk.len() > room {
                        body.extend_from_slice(&chunk[..room]);
                        truncated = true;
                        break;
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => return Err(Failure::NoAnswer(error_chain(&e))),
            }
        }
        Ok(Answer {
            status,
            headers,
            body,
            truncated,
        })
    }
}

/// `url` checked against the rules and, where its host is an address, the
/// address check (a name's addresses are checked when it is resolved).
pub fn check_url(allow: &AllowList, url: &str) -> Result<Url, String> {
    let parsed = allow.check(url)?;
    let literal = match parsed.host() {
        Some(Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
        Some(Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
        _ => None,
    };
    if let Some(ip) = literal {
        addresses::check(ip, allow)?;
    }
    Ok(parsed)
}

/// An error with its causes, on one line (reqwest's own message says little).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// rustls with the ring provider (the one the database's TLS already uses),
/// the system's roots and `extra_ca`'s.
fn tls_config(extra_ca: Option<&std::path::Path>) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        // A system certificate rustls cannot parse is skipped, as browsers do.
        let _ = roots.add(cert);
    }
    if let Some(path) = extra_ca {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect())
            .map_err(|e| {
                format!(
                    "--http-ca {}: not a PEM file of certificates ({e})",
                    path.display()
                )
            })?;
        if certs.is_empty() {
            return Err(format!(
                "--http-ca {}: no certificate in it",
                path.display()
            ));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| format!("--http-ca {}: {e}", path.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS settings: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}
