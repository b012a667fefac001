// Both kinds of call beyond the database, in JavaScript: charges an order with
// fetch() in the handler (a call, POST to its charge_url), records the charge
// id the answer names in the invoice's marker column, and asks for a
// notification (POST to its notify_url) to be sent once the transaction commits.
//
// Test knob in the order: "fail_unless_repeat": true fails the run (retryable)
// after the charge was answered for the first time and the notification asked
// for: the run rolls back, so no notification is sent, and the next run's
// charge repeats the key and is answered as the first.
import { HandlerError, sendAfterCommit } from "inbox-guest";

export async function handle(event, db) {
  const order = event.json();
  const body = { order_id: order.order_id, amount: order.amount };
  const answer = await fetch(order.charge_url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  }).catch((e) => {
    throw new HandlerError(`no answer from the charge: ${e}`, { retryable: true });
  });
  if (!answer.ok) {
    throw new HandlerError(`the charge answered ${answer.status}`, { retryable: answer.status >= 500 });
  }
  const charge = await answer.json();
  sendAfterCommit("POST", order.notify_url, { json: body });
  if (order.fail_unless_repeat && !charge.repeat) {
    throw new HandlerError(`failing after charge ${charge.charge_id}`, { retryable: true });
  }
  db.execute("INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ($1, $2, $3, $4)", [
    order.order_id,
    order.amount,
    event.messageId,
    charge.charge_id,
  ]);
}
