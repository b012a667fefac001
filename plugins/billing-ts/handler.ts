// Billing in TypeScript: one invoice row per order message, like plugins/billing.
// `inbox-host build` type-checks it with `tsc --strict` before bundling.
import { type Db, type Event, HandlerError } from "inbox-guest";

const MARKER = "billing-v1";

interface Order {
  order_id: string | number;
  amount: number;
}

function asOrder(value: unknown): Order {
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new HandlerError(`an order is a JSON object, not ${JSON.stringify(value)}`);
  }
  const { order_id, amount } = value as Record<string, unknown>;
  if (!(typeof order_id === "string" || Number.isInteger(order_id))) {
    throw new HandlerError(`order_id must be a string or an integer, not ${JSON.stringify(order_id)}`);
  }
  if (typeof amount !== "number") {
    throw new HandlerError(`amount must be a number, not ${JSON.stringify(amount)}`);
  }
  return { order_id: order_id as string | number, amount };
}

export function handle(event: Event, db: Db): void {
  const order = asOrder(event.json());
  db.execute(
    "INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ($1, $2, $3, $4)",
    [String(order.order_id), order.amount, event.messageId, MARKER],
  );
}
