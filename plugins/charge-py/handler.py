"""Both kinds of call beyond the database, in Python: charges an order with a
call in the handler (``POST`` to its ``charge_url``), records the charge id the
answer names in the invoice's ``marker`` column, and asks for a notification
(``POST`` to its ``notify_url``) to be sent once the transaction commits.

Test knob in the order: ``"fail_unless_repeat": true`` fails the run (retryable)
after the charge was answered for the first time and the notification asked
for: the run rolls back, so no notification is sent, and the next run's charge
repeats the key and is answered as the first.
"""

from inbox_guest import HandlerError, call, send_after_commit


def handle(event, db):
    order = event.json()
    body = {"order_id": order["order_id"], "amount": order["amount"]}
    answer = call("POST", order["charge_url"], json=body)
    if not answer.ok:
        raise HandlerError(
            f"the charge answered {answer.status}", retryable=answer.status >= 500
        )
    charge = answer.json()
    send_after_commit("POST", order["notify_url"], json=body)
    if order.get("fail_unless_repeat") and not charge.get("repeat"):
        raise HandlerError(f"failing after charge {charge['charge_id']}", retryable=True)
    db.execute(
        "INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ($1, $2, $3, $4)",
        [order["order_id"], order["amount"], event.message_id, charge["charge_id"]],
    )
