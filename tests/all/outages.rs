//! The real binary rides out a database and a broker that go away for 30 s:
//! same process, nothing lost, nothing applied twice, and /health says why it
//! is not ready meanwhile.

use std::time::Duration;

use inbox_host_tests::stage::Stage;
use inbox_host_tests::{host, plugin, wait_until};

const LONG: Duration = Duration::from_secs(180);
/// How long each outage lasts: the scenario, not a wait for some state.
const OUTAGE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread")]
async fn a_database_and_then_a_broker_away_for_thirty_seconds_cost_nothing_and_the_host_stays_up() {
    let stage = Stage::new(3).await;
    let Some(cluster) = stage.db.cluster() else {
        eprintln!("skipped: DATABASE_URL points at a server this test cannot stop");
        return;
    };
    let orders = |from: i64, to: i64| {
        (from..to)
            .map(|n| stage.order(&format!("order-{n}"), n))
            .collect()
    };
    stage.produce(orders(0, 300)).await;
    let mut host = stage.spawn_host(&plugin("billing"), &[]);
    let addr = host.status_addr().await;
    let pid = host.pid();
    let health = || host::http_get(&addr, "/health");
    let not_ready_for = |reason: &str| {
        let answer = health();
        answer.starts_with("HTTP/1.1 503") && answer.contains(reason)
    };
    wait_until("the first orders invoiced", LONG, || async {
        stage.db.count("SELECT count(*) FROM invoices").await >= 300
    })
    .await;

    cluster.stop().expect("stopping PostgreSQL");
    stage.produce(orders(300, 600)).await;
    wait_until("/health says not ready: PostgreSQL", LONG, || async {
        not_ready_for("PostgreSQL unreachable")
    })
    .await;
    let ready = host::http_get(&addr, "/health/ready");
    assert!(
        ready.starts_with("HTTP/1.1 503") && ready.contains("\"PostgreSQL unreachable\""),
        "{ready}"
    );
    tokio::time::sleep(OUTAGE).await;
    assert!(
        host.is_running(),
        "the host exited while the database was down:\n{}",
        host.log()
    );
    cluster.resume().expect("starting PostgreSQL again");
    wait_until(
        "the orders sent during the database outage invoiced",
        LONG,
        || async { stage.db.count("SELECT count(*) FROM invoices").await >= 600 },
    )
    .await;

    stage.produce(orders(600, 900)).await;
    stage.broker.set_down(true).expect("broker down");
    wait_until("/health says not ready: Kafka", LONG, || async {
        not_ready_for("Kafka unreachable")
    })
    .await;
    tokio::time::sleep(OUTAGE).await;
    assert!(
        host.is_running(),
        "the host exited while the broker was down:\n{}",
        host.log()
    );
    stage.broker.set_down(false).expect("broker up");
    wait_until(
        "every order invoiced and every offset committed",
        LONG,
        || async {
            stage.db.count("SELECT count(*) FROM invoices").await >= 900
                && stage.committed_total(3).await == 900
        },
    )
    .await;

    wait_until("/health ready again", LONG, || async {
        health().starts_with("HTTP/1.1 200")
    })
    .await;
    assert_eq!(host.pid(), pid);
    assert_eq!(stage.db.count("SELECT count(*) FROM invoices").await, 900);
    assert_eq!(
        stage
            .db
            .count("SELECT count(DISTINCT message_id) FROM invoices")
            .await,
        900
    );
    assert!(host.stop(), "{}", host.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_started_while_the_database_is_down_waits_for_it_and_then_consumes() {
    let stage = Stage::new(1).await;
    let Some(cluster) = stage.db.cluster() else {
        eprintln!("skipped: DATABASE_URL points at a server this test cannot stop");
        return;
    };
    stage
        .produce(
            (0..50)
                .map(|n| stage.order(&format!("order-{n}"), n))
                .collect(),
        )
        .await;
    cluster.stop().expect("stopping PostgreSQL");
    let mut host = stage.spawn_host(&plugin("billing"), &["--connect-timeout", "2"]);
    wait_until(
        "the host says the database is unreachable",
        LONG,
        || async { host.log().contains("cannot connect to PostgreSQL") },
    )
    .await;
    assert!(host.is_running(), "{}", host.log());
    cluster.resume().expect("starting PostgreSQL again");
    wait_until(
        "every order invoiced once the database is back",
        LONG,
        || async { stage.db.count("SELECT count(*) FROM invoices").await == 50 },
    )
    .await;
    assert!(host.stop(), "{}", host.log());
}
