//! Deploying a new plugin version into running hosts by replacing the file.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use inbox_host::plugin::digest_of;
use inbox_host_tests::host::Host;
use inbox_host_tests::stage::Stage;
use inbox_host_tests::{billing_v2, plugin, wait_until};

const LONG: Duration = Duration::from_secs(120);

/// A plugin file a deploy tool replaces by writing a temp file and renaming it.
struct Deployed {
    _dir: tempfile::TempDir,
    live: PathBuf,
}

impl Deployed {
    fn new(first: &Path) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let live = dir.path().join("billing.wasm");
        std::fs::copy(first, &live).expect("install v1");
        Self { _dir: dir, live }
    }

    fn deploy_bytes(&self, bytes: &[u8]) -> SystemTime {
        let staged = self.live.with_extension("wasm.new");
        std::fs::write(&staged, bytes).expect("stage");
        std::fs::rename(&staged, &self.live).expect("rename into place");
        SystemTime::now()
    }

    fn deploy(&self, version: &Path) -> SystemTime {
        self.deploy_bytes(&std::fs::read(version).expect("version"))
    }
}

fn digest(path: &Path) -> String {
    digest_of(&std::fs::read(path).expect("plugin"))
}

async fn invoices(stage: &Stage) -> i64 {
    stage.db.count("SELECT count(*) FROM invoices").await
}

/// Until every host has joined the group (and is ready).
async fn wait_assigned(hosts: &[&Host]) {
    wait_until("hosts joined and ready", LONG, || async {
        hosts.iter().all(|h| h.is_ready())
    })
    .await;
}

/// The host's plugin swaps and rejections so far, from its `/metrics`.
fn swaps(host: &Host) -> f64 {
    host.metric("inbox_host_plugin_swaps_total").unwrap_or(0.0)
}

fn rejections(host: &Host) -> f64 {
    host.metric("inbox_host_plugin_rejections_total")
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn v1_v2_v1_v2_swaps_under_a_steady_stream_handle_every_message_once_by_one_version() {
    let stage = Stage::new(3).await;
    let (v1, v2) = (plugin("billing"), billing_v2());
    let (d1, d2) = (digest(&v1), digest(&v2));
    assert_ne!(d1, d2);
    let deployed = Deployed::new(&v1);
    let host = stage.spawn_host(&deployed.live, &[]);
    wait_assigned(&[&host]).await;

    // A steady stream, 50 orders every 100 ms, until the last swap has been seen
    // on a message: a stream that ran dry before a slow swap would prove nothing.
    let swaps_done = AtomicBool::new(false);
    let producing = async {
        let mut produced = 0i64;
        while !swaps_done.load(Ordering::SeqCst) {
            let batch = (produced..produced + 50)
                .map(|n| stage.order(&format!("order-{n}"), n))
                .collect();
            stage.produce(batch).await;
            produced += 50;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        produced
    };
    let swapping = async {
        let mut report = Vec::new();
        for (n, (version, digest)) in [(&v2, &d2), (&v1, &d1), (&v2, &d2)].into_iter().enumerate() {
            let threshold = (n as i64 + 1) * 600;
            wait_until("progress before the next deploy", LONG, || async {
                invoices(&stage).await >= threshold
            })
            .await;
            let before = invoices(&stage).await;
            let deployed_at = deployed.deploy(version);
            let since = deployed_at
                .duration_since(UNIX_EPOCH)
                .expect("clock")
                .as_secs_f64();
            let started = Instant::now();
            wait_until("a message handled by the new version", LONG, || async {
                stage
                    .db
                    .count(&format!(
                        "SELECT count(*) FROM inbox_host.inbox WHERE plugin_digest = '{digest}' AND received_at >= to_timestamp({since})"
                    ))
                    .await
                    > 0
            })
            .await;
            let latency = started.elapsed();
            let during = invoices(&stage).await - before;
            report.push(format!(
                "swap {} -> {}: first message on the new version {latency:?} after the rename ({during} messages handled meanwhile)",
                n + 1,
                &digest[..15]
            ));
        }
        swaps_done.store(true, Ordering::SeqCst);
        report
    };
    let (total, report) = tokio::join!(producing, swapping);
    wait_until("every order invoiced", LONG, || async {
        invoices(&stage).await >= total
    })
    .await;
    for line in &report {
        eprintln!("{line}");
    }

    let db = &stage.db;
    assert_eq!(invoices(&stage).await, total);
    assert_eq!(
        db.count("SELECT count(DISTINCT message_id) FROM invoices")
            .await,
        total
    );
    assert_eq!(
        db.count("SELECT count(*) FROM inbox_host.inbox").await,
        total
    );
    let consistent = db
        .count(&format!(
            "SELECT count(*) FROM inbox_host.inbox i JOIN invoices v USING (message_id)
             WHERE (i.plugin_digest = '{d1}' AND v.marker = 'billing-v1')
                OR (i.plugin_digest = '{d2}' AND v.marker = 'billing-v2')"
        ))
        .await;
    assert_eq!(
        consistent, total,
        "a row's digest does not match the marker its invoice carries"
    );
    for (digest, name) in [(&d1, "v1"), (&d2, "v2")] {
        let handled = db
            .count(&format!(
                "SELECT count(*) FROM inbox_host.inbox WHERE plugin_digest = '{digest}'"
            ))
            .await;
        assert!(handled > 0, "{name} handled nothing");
    }
    // Per partition, in offset order, the version changes at most three times.
    let changes = db
        .count(
            "SELECT count(*) FROM (
                 SELECT plugin_digest <> lag(plugin_digest) OVER (PARTITION BY kafka_partition ORDER BY kafka_offset) AS changed
                 FROM inbox_host.inbox) s
             WHERE changed",
        )
        .await;
    assert!(
        changes <= 9,
        "versions interleave within a partition: {changes} changes"
    );
    assert_eq!(swaps(&host), 3.0, "{}", host.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broken_version_is_rejected_and_the_stream_continues_on_the_old_one() {
    let stage = Stage::new(2).await;
    let d1 = digest(&plugin("billing"));
    let deployed = Deployed::new(&plugin("billing"));
    let mut host = stage.spawn_host(&deployed.live, &[]);
    wait_assigned(&[&host]).await;
    stage
        .produce(
            (0..100)
                .map(|n| stage.order(&format!("a-{n}"), n))
                .collect(),
        )
        .await;
    wait_until("the first 100 invoiced", LONG, || async {
        invoices(&stage).await == 100
    })
    .await;

    let v1 = std::fs::read(plugin("billing")).expect("v1");
    deployed.deploy_bytes(&v1[..v1.len() / 3]);
    wait_until("the truncated file rejected", LONG, || async {
        rejections(&host) >= 1.0
    })
    .await;
    deployed.deploy(&plugin("not-a-handler"));
    wait_until("the wrong world rejected", LONG, || async {
        rejections(&host) >= 2.0
    })
    .await;
    let log = host.log();
    assert!(
        log.contains("is not a valid WebAssembly component"),
        "{log}"
    );
    assert!(
        log.contains("does not match the `inbox:host/handler` world"),
        "{log}"
    );

    stage
        .produce(
            (0..100)
                .map(|n| stage.order(&format!("b-{n}"), n))
                .collect(),
        )
        .await;
    wait_until("the next 100 invoiced", LONG, || async {
        invoices(&stage).await == 200
    })
    .await;
    assert!(host.is_running());
    assert_eq!(
        stage
            .db
            .count(&format!(
                "SELECT count(*) FROM inbox_host.inbox WHERE plugin_digest = '{d1}'"
            ))
            .await,
        200,
        "every message ran on the old version"
    );
    assert_eq!(swaps(&host), 0.0, "{}", host.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hosts_in_one_group_both_pick_up_the_deploy() {
    let stage = Stage::new(4).await;
    let d2 = digest(&billing_v2());
    let deployed = Deployed::new(&plugin("billing"));
    let a = stage.spawn_host(&deployed.live, &["--worker-id", "host-a"]);
    let b = stage.spawn_host(&deployed.live, &["--worker-id", "host-b"]);
    wait_assigned(&[&a, &b]).await;

    deployed.deploy(&billing_v2());
    wait_until("both hosts swapped", LONG, || async {
        swaps(&a) == 1.0 && swaps(&b) == 1.0
    })
    .await;
    stage
        .produce(
            (0..200)
                .map(|n| stage.order(&format!("after-{n}"), n))
                .collect(),
        )
        .await;
    wait_until("200 invoiced", LONG, || async {
        invoices(&stage).await == 200
    })
    .await;
    let on_v2 = stage
        .db
        .count(&format!(
            "SELECT count(*) FROM inbox_host.inbox WHERE plugin_digest = '{d2}'"
        ))
        .await;
    let workers = stage
        .db
        .count(&format!(
            "SELECT count(DISTINCT worker_id) FROM inbox_host.inbox WHERE plugin_digest = '{d2}'"
        ))
        .await;
    assert_eq!((on_v2, workers), (200, 2));

    // SIGHUP asks for a reload; the file is unchanged, so nothing is swapped again.
    let checks = || a.metric("inbox_host_plugin_reload_checks_total");
    let before = checks().expect("the reload checks counter");
    a.hangup();
    wait_until("the file checked after SIGHUP", LONG, || async {
        checks() > Some(before)
    })
    .await;
    assert_eq!(swaps(&a), 1.0, "{}", a.log());
}
