"""Billing in Python: one invoice row per order message, like plugins/billing.

An order is ``{"order_id": "A-17" or 17, "amount": 12.5}``; anything else is a
payload the handler rejects (a fatal error: the message is set aside).
"""

from inbox_guest import Db, Event, HandlerError

MARKER = "billing-v1"


def handle(event: Event, db: Db) -> None:
    order = event.json()
    if not isinstance(order, dict):
        raise HandlerError(f"an order is a JSON object, not {order!r}")
    order_id = order.get("order_id")
    if isinstance(order_id, int) and not isinstance(order_id, bool):
        order_id = str(order_id)
    if not isinstance(order_id, str):
        raise HandlerError(f"order_id must be a string or an integer, not {order_id!r}")
    amount = order.get("amount")
    if isinstance(amount, bool) or not isinstance(amount, (int, float)):
        raise HandlerError(f"amount must be a number, not {amount!r}")
    db.execute(
        "INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ($1, $2, $3, $4)",
        [order_id, float(amount), event.message_id, MARKER],
    )
