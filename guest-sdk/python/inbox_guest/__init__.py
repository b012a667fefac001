"""SDK for inbox-host handler plugins written in Python.

A plugin is a folder with a ``handler.py`` that defines one function::

    from inbox_guest import Db, Event, HandlerError

    def handle(event: Event, db: Db) -> None:
        order = event.json()
        db.execute(
            "INSERT INTO invoices (order_id, amount, message_id) VALUES ($1, $2, $3)",
            [order["order_id"], order["amount"], event.message_id],
        )

A handler that is a step in a pipeline also publishes with
``publish(topic, value, key=..., headers=...)``: the message is stored in the same
transaction and sent to Kafka after it commits (docs/outbox.md). One that
reaches beyond the database asks for an HTTP request with
``send_after_commit(method, url, json=...)``, sent once the transaction commits,
or makes it now with ``call(method, url, json=...)`` when it needs the answer
(docs/effects.md); both carry an ``Idempotency-Key`` the host derives.

``inbox-host build <folder>`` turns it into a component. Returning asks the host
to commit the message's transaction; raising rolls it back. Raise
``HandlerError(message, retryable=...)`` to say whether delivering the message
again can help; a ``DbError`` that escapes the handler keeps the host's judgement
of its statement; any other exception is a crash (like a Rust panic): fatal, and
recorded with its last traceback line.
"""

from ._calls import CallError, Response, call
from ._db import Db, DbError, Json, Row, Rows, Timestamp
from ._errors import HandlerError
from ._event import Event, Header
from ._outbox import PublishError, publish
from ._requests import RequestError, send_after_commit

__all__ = [
    "CallError",
    "Db",
    "DbError",
    "Event",
    "HandlerError",
    "Header",
    "Json",
    "PublishError",
    "RequestError",
    "Response",
    "Row",
    "Rows",
    "Timestamp",
    "call",
    "publish",
    "send_after_commit",
]
