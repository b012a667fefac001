//! Calls in the handler: charges an order with a `POST` to its `charge_url`
//! while the transaction is open, then records the charge id the answer names
//! in the invoice's `marker` column, in the same transaction. The host keys
//! the call; a run that rolls back and runs again repeats the key, so a
//! receiver that honours it charges once and answers the repeat the same.
//!
//! Given a `notify_url`, it also asks for a notification (`POST` of the order)
//! sent once the transaction commits: charge by call, notify after commit.
//!
//! Test knobs in the order: `"trap_unless_repeat": true` traps after a charge
//! answered for the first time (the run rolls back; the next run's repeat is
//! recorded); `"calls": n` charges n times; `"headers": [[name, value]]` adds
//! headers; `"swallow_errors": true` records `"no charge"` and returns ok when
//! a call fails (the host still fails a run whose call it refused).
use inbox_guest::{call, send_after_commit, Db, Event, HandlerError, Request};
use serde::Deserialize;

#[derive(Deserialize)]
struct Order {
    order_id: String,
    amount: f64,
    charge_url: String,
    notify_url: Option<String>,
    calls: Option<usize>,
    #[serde(default)]
    trap_unless_repeat: bool,
    #[serde(default)]
    swallow_errors: bool,
    #[serde(default)]
    headers: Vec<(String, String)>,
}

/// What the charge endpoint answers.
#[derive(Deserialize)]
struct Charge {
    charge_id: String,
    #[serde(default)]
    repeat: bool,
}

inbox_guest::handler!(handle);

fn handle(event: &Event, db: &Db) -> Result<(), HandlerError> {
    let order: Order = event.json()?;
    let mut charge_id = String::from("no charge");
    for _ in 0..order.calls.unwrap_or(1) {
        let mut request = Request::post(order.charge_url.as_str())
            .json(&serde_json::json!({ "order_id": order.order_id, "amount": order.amount }))?;
        for (name, value) in &order.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let answer = match call(request) {
            Ok(answer) => answer,
            Err(_) if order.swallow_errors => continue,
            Err(e) => return Err(e.into()),
        };
        if answer.status >= 500 {
            return Err(HandlerError::retryable(format!(
                "the charge answered {}",
                answer.status
            )));
        }
        if !answer.is_success() {
            return Err(HandlerError::fatal(format!(
                "the charge was declined ({})",
                answer.status
            )));
        }
        let charge: Charge = answer.json()?;
        if order.trap_unless_repeat && !charge.repeat {
            panic!("trapping after the charge {} was made", charge.charge_id);
        }
        charge_id = charge.charge_id;
    }
    if let Some(url) = &order.notify_url {
        send_after_commit(Request::post(url.as_str()).json(&serde_json::json!({
            "order_id": order.order_id, "charge_id": charge_id,
        }))?)?;
    }
    db.execute(
        "INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ($1, $2, $3, $4)",
        &[
            order.order_id.as_str().into(),
            order.amount.into(),
            event.message_id.as_str().into(),
            charge_id.as_str().into(),
        ],
    )?;
    Ok(())
}
