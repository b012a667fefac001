"""A pipeline step in Python, like plugins/billing-publish: one invoice row per
order, and ``invoice-created`` published to ``invoices-created`` (keyed by the
order id) in the same transaction. ``"publish_to"`` in the order publishes
elsewhere (the host refuses a topic it does not allow)."""

from inbox_guest import Db, Event, publish


def handle(event: Event, db: Db) -> None:
    order = event.json()
    order_id = str(order["order_id"])
    db.execute(
        "INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ($1, $2, $3, $4)",
        [order_id, float(order["amount"]), event.message_id, "publish-py"],
    )
    publish(
        order.get("publish_to", "invoices-created"),
        {"order_id": order_id, "amount": order["amount"], "invoice_of": event.message_id},
        key=order_id,
        headers={"event-type": "invoice-created"},
    )
