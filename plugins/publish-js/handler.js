// A pipeline step in JavaScript, like plugins/billing-publish: one invoice row
// per order, and invoice-created published to invoices-created (keyed by the
// order id) in the same transaction. "publish_to" in the order publishes
// elsewhere (the host refuses a topic it does not allow).
import { publish } from "inbox-guest";

/** @param {import("inbox-guest").Event} event @param {import("inbox-guest").Db} db */
export function handle(event, db) {
  const order = event.json();
  const orderId = String(order.order_id);
  db.execute(
    "INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ($1, $2, $3, $4)",
    [orderId, order.amount, event.messageId, "publish-js"],
  );
  publish(
    order.publish_to ?? "invoices-created",
    { order_id: orderId, amount: order.amount, invoice_of: event.messageId },
    { key: orderId, headers: { "event-type": "invoice-created" } },
  );
}
