//! The real `inbox-host` binary as a child process, its stderr kept for asserts.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

/// Path of the `inbox-host` binary next to this test binary (scripts/test
/// builds it first).
pub fn bin() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binaries live in target/<profile>/deps");
    let bin = profile_dir.join("inbox-host");
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build -p inbox-host` (scripts/test does)",
        bin.display()
    );
    bin
}

/// Runs `inbox-host <args>` to completion with a clean environment of ours.
pub fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    command(args, env).output().expect("running inbox-host")
}

/// Runs `inbox-host <args>` against a database nobody listens on and asserts
/// it refuses them before reaching it: a failing exit, `said` on stderr, no
/// panic.
pub fn refuses(args: &[&str], said: &str) {
    let out = run(
        args,
        &[("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?}");
    assert!(stderr.contains(said), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
}

/// The main job's required flags, for a run that is to be refused.
pub const MAIN_JOB: [&str; 6] = ["--plugin", "x.wasm", "--group", "g", "--topic", "t"];

fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(bin());
    command.args(args);
    for var in [
        "DATABASE_URL",
        "KAFKA_BROKERS",
        "INBOX_PLUGIN",
        "INBOX_GROUP",
        "INBOX_TOPIC",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    ] {
        command.env_remove(var);
    }
    command.env("RUST_LOG", "info");
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

/// A running host; killed on drop if still running.
pub struct Host {
    pub child: Child,
    pub log: PathBuf,
    /// Its `--status-addr`, when it serves one (port 0: the kernel picks one).
    requested_status: Option<String>,
    /// The address its status endpoint is bound to, once known.
    bound_status: std::sync::OnceLock<String>,
    _dir: tempfile::TempDir,
}

impl Host {
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("host.log");
        let file = std::fs::File::create(&log).expect("log file");
        let child = command(args, env)
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("spawning inbox-host");
        let requested_status = args
            .iter()
            .position(|a| *a == "--status-addr")
            .and_then(|i| args.get(i + 1))
            .map(|a| a.to_string());
        Self {
            child,
            log,
            requested_status,
            bound_status: std::sync::OnceLock::new(),
            _dir: dir,
        }
    }

    /// Where its status endpoint listens, waiting until it does. With
    /// `--status-addr 127.0.0.1:0` the host binds a port the kernel picks (no
    /// race with other tests for a "free" port) and logs the bound address at
    /// start; that line is the only place the address exists.
    pub async fn status_addr(&self) -> String {
        crate::wait_until(
            "the host listening on its status address",
            std::time::Duration::from_secs(300),
            || async { self.listening_at().is_some() },
        )
        .await;
        self.listening_at().expect("known once listening")
    }

    /// The bound status address, if the host has said it yet.
    fn listening_at(&self) -> Option<String> {
        if let Some(addr) = self.bound_status.get() {
            return Some(addr.clone());
        }
        let requested = self.requested_status.as_deref()?;
        let addr = if requested.ends_with(":0") {
            bound_address_in(&self.log())?
        } else {
            requested.to_string()
        };
        Some(self.bound_status.get_or_init(|| addr).clone())
    }

    /// The value of an unlabelled sample on its `/metrics` (`None` while the
    /// endpoint does not answer or the sample is absent).
    pub fn metric(&self, name: &str) -> Option<f64> {
        let response = try_http_get(&self.listening_at()?, "/metrics")?;
        http_body(&response).lines().find_map(|line| {
            line.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
    }

    /// The sum of a labelled family's samples that carry `label` (such as
    /// `outcome="processed"`) on its `/metrics`; `None` while it does not answer.
    pub fn metric_sum(&self, family: &str, label: &str) -> Option<f64> {
        self.metric_sum_of(family, &[label])
    }

    /// [`Host::metric_sum`] of the samples that carry every one of `labels`.
    pub fn metric_sum_of(&self, family: &str, labels: &[&str]) -> Option<f64> {
        let response = try_http_get(&self.listening_at()?, "/metrics")?;
        let prefix = format!("{family}{{");
        Some(
            http_body(&response)
                .lines()
                .filter(|line| line.starts_with(&prefix) && labels.iter().all(|l| line.contains(l)))
                .filter_map(|line| line.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
                .sum(),
        )
    }

    /// Whether its `/health/ready` answers 200: joined its group, database
    /// and brokers answering, nothing stalled.
    pub fn is_ready(&self) -> bool {
        self.listening_at()
            .and_then(|addr| try_http_get(&addr, "/health/ready"))
            .is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    }

    /// Everything the host logged so far (ANSI colours stripped).
    pub fn log(&self) -> String {
        strip_ansi(&std::fs::read_to_string(&self.log).unwrap_or_default())
    }

    /// The process's peak resident memory so far, from /proc (Linux).
    pub fn peak_rss_bytes(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("proc status");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM");
        kib << 10
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pid fits")
    }

    /// SIGKILL: no chance to commit anything.
    pub fn kill_hard(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGHUP (a reload request, or a terminal closing).
    pub fn hangup(&self) {
        let _ = Command::new("kill")
            .args(["-HUP", &self.pid().to_string()])
            .status();
    }

    /// SIGTERM and wait for a clean exit; returns whether it exited successfully.
    pub fn stop(&mut self) -> bool {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        self.child.wait().map(|s| s.success()).unwrap_or(false)
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- inbox-host log ({}) ---\n{}",
                self.log.display(),
                self.log()
            );
        }
        if self.is_running() {
            self.kill_hard();
        }
    }
}

pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `GET path` on the host's status address; the whole response, status line
/// included.
pub fn http_get(addr: &str, path: &str) -> String {
    http_request(addr, "GET", path)
}

/// `method path` on the host's status address, on a connection closed after
/// the response; the whole response, status line included.
pub fn http_request(addr: &str, method: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("status endpoint");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .expect("request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response");
    response
}

/// [`http_get`], or `None` while nothing listens at `addr`.
pub fn try_http_get(addr: &str, path: &str) -> Option<String> {
    std::net::TcpStream::connect(addr).ok()?;
    Some(http_get(addr, path))
}

/// The body of a response from [`http_request`].
pub fn http_body(response: &str) -> &str {
    response.split_once("\r\n\r\n").map_or("", |(_, body)| body)
}

/// The address in the host's "serving /metrics" start-up line, text
/// (`addr=127.0.0.1:4711`) or JSON (`"addr":"127.0.0.1:4711"`).
fn bound_address_in(log: &str) -> Option<String> {
    let line = log.lines().find(|l| l.contains("serving /metrics"))?;
    let (_, rest) = line
        .split_once("addr=")
        .or_else(|| line.split_once("\"addr\":\""))?;
    let addr: String = rest
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != '"')
        .collect();
    Some(addr)
}
