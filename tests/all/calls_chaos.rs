//! Calls beyond the database under crashes: 10,000 orders, each charged by a
//! call in the handler and notified by a request after commit, through two
//! hosts SIGKILLed again and again and one PostgreSQL crash. The receiver,
//! which honours `Idempotency-Key` like a payment API, applied exactly one
//! charge and one notification per order, and each invoice records the charge
//! the receiver applied for it.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use inbox_host::inbox::{call_key, idempotency_key};
use inbox_host_tests::host::Host;
use inbox_host_tests::receiver::Receiver;
use inbox_host_tests::stage::Stage;
use inbox_host_tests::{plugin, wait_until};

const ORDERS: i64 = 10_000;
const LONG: Duration = Duration::from_secs(600);

#[tokio::test(flavor = "multi_thread")]
async fn ten_thousand_orders_charged_and_notified_through_kills_and_a_database_crash_apply_each_once(
) {
    let stage = Stage::new(3).await;
    let cluster = stage.db.cluster().expect("a throwaway cluster to crash");
    let receiver = Receiver::start().await;
    let orders = (0..ORDERS)
        .map(|n| {
            let id = format!("order-{n}");
            let payload = serde_json::json!({
                "order_id": id, "amount": n,
                "charge_url": format!("{}/charges", receiver.origin),
                "notify_url": format!("{}/notify", receiver.origin),
            });
            stage.record(&id, None, payload.to_string())
        })
        .collect();
    stage.produce(orders).await;
    let charge = plugin("charge");
    let spawn = || stage.spawn_host(&charge, &["--http-allow", receiver.origin.as_str()]);
    let mut hosts: [Host; 2] = [spawn(), spawn()];

    // A SIGKILL of one host at each point of progress (whatever it had in
    // flight is lost: calls answered and not committed, requests committed and
    // not sent or sent and not deleted), and a crash of PostgreSQL at another.
    let kill_points = [1_000, 3_000, 5_500, 8_000];
    let crash_point = 4_000;
    let (mut kills, mut crashed, mut landed) = (0, false, 0);
    let started = Instant::now();
    while kills < kill_points.len() || !crashed {
        let invoices = stage.db.count("SELECT count(*) FROM invoices").await;
        if kills < kill_points.len() && invoices >= kill_points[kills] {
            landed += i64::from(invoices < ORDERS);
            hosts[kills % 2].kill_hard();
            hosts[kills % 2] = spawn();
            kills += 1;
        }
        if !crashed && invoices >= crash_point {
            cluster.crash().expect("crashing PostgreSQL");
            cluster
                .resume()
                .expect("PostgreSQL restarts with crash recovery");
            crashed = true;
        }
        assert!(
            started.elapsed() < LONG,
            "stuck at {invoices} invoices:\n{}",
            hosts[0].log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "{landed} of {} kills landed while orders were left",
        kill_points.len()
    );

    wait_until(
        "every order invoiced and every request sent",
        LONG,
        || async {
            stage.db.count("SELECT count(*) FROM invoices").await == ORDERS
                && stage
                    .db
                    .count("SELECT count(*) FROM inbox_host.requests")
                    .await
                    == 0
        },
    )
    .await;
    let applied = receiver.applied_keys();
    let group = &stage.group;
    let charges: HashMap<String, String> = (0..ORDERS)
        .map(|n| format!("order-{n}"))
        .filter_map(|id| Some((id.clone(), applied.get(&call_key(group, &id, 0))?.clone())))
        .collect();
    let notified: HashSet<String> = (0..ORDERS)
        .map(|n| format!("order-{n}"))
        .filter(|id| applied.contains_key(&idempotency_key(group, id, 0)))
        .collect();
    assert_eq!(charges.len() as i64, ORDERS, "one charge per order");
    assert_eq!(notified.len() as i64, ORDERS, "one notification per order");
    assert_eq!(
        applied.len() as i64,
        2 * ORDERS,
        "no effect under a key no order's run derives"
    );
    let recorded: Vec<(String, String)> = sqlx::query_as("SELECT order_id, marker FROM invoices")
        .fetch_all(&stage.db.pool)
        .await
        .expect("invoices");
    let mismatched: Vec<_> = recorded
        .iter()
        .filter(|(id, marker)| charges.get(id) != Some(marker))
        .take(5)
        .collect();
    assert!(
        mismatched.is_empty(),
        "each invoice records the charge applied for its order: {mismatched:?}"
    );
    let repeats = receiver.arrivals().len() as i64 - 2 * ORDERS;
    eprintln!("{repeats} repeated sends, each answered as the first");
    assert!(
        landed >= 3,
        "too few kills hit running work to test anything"
    );
}
