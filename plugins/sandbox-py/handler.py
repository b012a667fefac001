"""The sandbox test plugins of plugins/ in one Python handler: the payload's
``do`` names the behaviour (each writes the order's invoice first where the
Rust twin does).

- ``exception-after-write``: an uncaught exception (Rust: panic-after-write)
- ``error-after-write``: a retryable HandlerError (error-after-write)
- ``swallow-db-error``: catches a failed statement and returns (swallow-db-error)
- ``probe``: files, directory, environment, socket (sandbox-probe)
- ``loop``: never returns (infinite-loop)
- ``memory``: allocates without bound (memory-bomb)
- ``remember``: writes ``seen-<n>``, n counting this instance's messages
  (shows whether an instance was reused)
"""

import os
import socket

from inbox_guest import Db, DbError, Event, HandlerError

MARKER = "billing-v1"
_seen = 0


def handle(event: Event, db: Db) -> None:
    global _seen
    _seen += 1
    order = event.json()
    behaviour = order.get("do")
    if behaviour == "probe":
        return probe(event, db)
    if behaviour == "loop":
        while True:
            pass
    if behaviour == "memory":
        hoard = []
        while True:
            hoard.append(bytearray(1 << 20))
    db.execute(
        "INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ($1, $2, $3, $4)",
        [
            str(order["order_id"]),
            float(order["amount"]),
            event.message_id,
            f"seen-{_seen}" if behaviour == "remember" else MARKER,
        ],
    )
    if behaviour == "exception-after-write":
        raise ValueError("simulated exception after write")
    if behaviour == "error-after-write":
        raise HandlerError("simulated error after write", retryable=True)
    if behaviour == "swallow-db-error":
        try:
            db.execute("INSERT INTO no_such_table VALUES (1)")
        except DbError:
            pass


def probe(event: Event, db: Db) -> None:
    probes = {
        "file-read": lambda: f"{len(open('/etc/passwd', 'rb').read())} bytes",
        "dir-list": lambda: f"{len(os.listdir('/'))} entries",
        "env-home": lambda: os.environ["HOME"],
        "env-count": env_count,
        "tcp-connect": tcp_connect,
    }
    for name, attempt in probes.items():
        try:
            outcome = f"allowed: {attempt()}"
        except Exception as e:  # each probe reports how it was denied
            outcome = f"denied: {type(e).__name__}: {e}"
        db.execute(
            "INSERT INTO sandbox_probe (message_id, probe, outcome) VALUES ($1, $2, $3)",
            [event.message_id, name, outcome],
        )


def env_count() -> str:
    if not os.environ:
        raise LookupError("no variables visible")
    return f"{len(os.environ)} variables"


def tcp_connect() -> str:
    with socket.create_connection(("127.0.0.1", 5432), timeout=1):
        return "connected"
