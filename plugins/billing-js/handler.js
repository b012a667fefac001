// Billing in JavaScript: one invoice row per order message, like plugins/billing.
// An order is {"order_id": "A-17" or 17, "amount": 12.5}; anything else is a
// payload the handler rejects (a fatal error: the message is set aside).
import { HandlerError } from "inbox-guest";

const MARKER = "billing-v1";

/** @param {import("inbox-guest").Event} event @param {import("inbox-guest").Db} db */
export function handle(event, db) {
  const order = event.json();
  if (order === null || typeof order !== "object" || Array.isArray(order)) {
    throw new HandlerError(`an order is a JSON object, not ${JSON.stringify(order)}`);
  }
  let orderId = order.order_id;
  if (Number.isInteger(orderId)) orderId = String(orderId);
  if (typeof orderId !== "string") {
    throw new HandlerError(`order_id must be a string or an integer, not ${JSON.stringify(orderId)}`);
  }
  if (typeof order.amount !== "number") {
    throw new HandlerError(`amount must be a number, not ${JSON.stringify(order.amount)}`);
  }
  db.execute(
    "INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ($1, $2, $3, $4)",
    [orderId, order.amount, event.messageId, MARKER],
  );
}
