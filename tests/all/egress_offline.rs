//! The gate's address check where no packet can leave: the test runs itself
//! again inside `unshare -rnm` (a network namespace with only loopback, and
//! a mount namespace for its own /etc/hosts), where the private, metadata and
//! shared addresses are put on loopback with a listener on each. Names allowed
//! by a rule resolve to them; the gate must refuse each without connecting,
//! and a listener that sees a connection fails the test. An address a rule
//! names literally is reached, which shows the listeners would see one.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use inbox_host::egress::{AllowList, Call, Failure, Gate, GateSettings, Purpose};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Set in the run inside the namespaces.
const INSIDE: &str = "INBOX_TEST_OFFLINE_NAMESPACE";
const PORT: u16 = 8080;

/// Names, and the address each resolves to (in the namespace's /etc/hosts).
const REFUSED: &[(&str, &str)] = &[
    ("metadata.test", "169.254.169.254"),
    ("metadata-v6.test", "fd00:ec2::254"),
    ("ten.test", "10.1.2.3"),
    ("one-seven-two.test", "172.16.5.5"),
    ("one-nine-two.test", "192.168.7.7"),
    ("shared.test", "100.64.1.1"),
    ("link-local.test", "169.254.10.10"),
    ("unique-local.test", "fd12::5"),
    ("mapped.test", "::ffff:10.1.2.3"),
    ("nat64.test", "64:ff9b::a01:203"),
];
/// Named literally by a rule: reached.
const CONTROL: &str = "10.9.9.9";

#[tokio::test(flavor = "multi_thread")]
async fn private_metadata_and_shared_addresses_are_refused_with_no_connect_where_no_packet_can_leave(
) {
    if std::env::var_os(INSIDE).is_none() {
        return run_inside_namespaces();
    }
    let mut listeners = BTreeMap::new();
    for address in REFUSED
        .iter()
        .map(|(_, a)| *a)
        .filter(|a| !a.starts_with("::ffff:"))
        .chain([CONTROL])
    {
        listeners.insert(address, listen(address).await);
    }
    let mut rules: Vec<String> = REFUSED
        .iter()
        .map(|(name, _)| format!("http://{name}:{PORT}"))
        .collect();
    rules.push(format!("http://{CONTROL}:{PORT}"));
    let gate = Gate::new(GateSettings {
        allow: Arc::new(AllowList::parse(&rules).expect("rules")),
        timeout: Duration::from_secs(2),
        ..GateSettings::default()
    })
    .expect("gate");
    for (name, address) in REFUSED {
        let url = format!("http://{name}:{PORT}/latest/meta-data/");
        match gate.send(&call(&url)).await {
            Err(Failure::Refused(why)) => {
                assert!(
                    why.contains(address.trim_start_matches("::ffff:")) || why.contains(name),
                    "{url}: {why}"
                )
            }
            other => panic!("{url} ({address}) was not refused: {other:?}"),
        }
    }
    let control = format!("http://{CONTROL}:{PORT}/");
    let answer = gate.send(&call(&control)).await;
    assert!(
        matches!(&answer, Ok(a) if a.status == 204),
        "the literal rule is reached: {answer:?}"
    );
    let seen: BTreeMap<&str, usize> = listeners
        .iter()
        .map(|(a, n)| (*a, n.load(Ordering::SeqCst)))
        .collect();
    let expected: BTreeMap<&str, usize> = seen
        .keys()
        .map(|a| (*a, usize::from(*a == CONTROL)))
        .collect();
    assert_eq!(seen, expected, "connections each listener saw");
}

fn call(url: &str) -> Call<'_> {
    Call {
        method: "GET",
        url,
        headers: Vec::new(),
        body: b"",
        idempotency_key: "offline-test",
        purpose: Purpose::Call,
    }
}

/// A listener on `address` that answers 204 and counts connections.
async fn listen(address: &str) -> Arc<AtomicUsize> {
    let ip: std::net::IpAddr = address.parse().expect("an address");
    let listener = tokio::net::TcpListener::bind((ip, PORT))
        .await
        .unwrap_or_else(|e| panic!("listening on {address}: {e}"));
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            // The request first (a GET without a body: its head), then the answer.
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = stream
                .write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n")
                .await;
        }
    });
    seen
}

/// Runs this test again in new user, network and mount namespaces, with the
/// addresses on loopback and the names in a bind-mounted /etc/hosts.
fn run_inside_namespaces() {
    let hosts = tempfile::NamedTempFile::new().expect("hosts file");
    let mut text = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    for (name, address) in REFUSED {
        text.push_str(&format!("{address} {name}\n"));
    }
    std::fs::write(hosts.path(), text).expect("hosts file");
    let mut script = String::from("set -e\nip link set lo up\n");
    for address in REFUSED
        .iter()
        .map(|(_, a)| *a)
        .filter(|a| !a.starts_with("::ffff:"))
        .chain([CONTROL])
    {
        if address.contains(':') {
            script.push_str(&format!("ip -6 addr add {address}/128 dev lo nodad\n"));
        } else {
            script.push_str(&format!("ip addr add {address}/32 dev lo\n"));
        }
    }
    script.push_str("mount --bind \"$1\" /etc/hosts\nshift\nexec \"$@\"\n");
    let exe = std::env::current_exe().expect("the test binary");
    let test = "egress_offline::private_metadata_and_shared_addresses_are_refused_with_no_connect_where_no_packet_can_leave";
    let out = Command::new("unshare")
        .args(["--user", "--map-root-user", "--net", "--mount", "sh", "-c"])
        .arg(&script)
        .arg("sh")
        .arg(hosts.path())
        .arg(exe)
        .args([test, "--exact", "--nocapture"])
        .env(INSIDE, "1")
        .output()
        .expect("unshare (util-linux) runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "inside the namespaces:\n{stdout}\n{stderr}"
    );
}
