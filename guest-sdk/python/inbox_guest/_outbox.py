"""Messages published in the message's transaction and sent after it commits."""

import json
from typing import Any, Mapping, Optional, Union

from componentize_py_types import Err
from wit_world.imports import outbox as wit
from wit_world.imports import inbox_host_types as types


class PublishError(Exception):
    """A message the host refused (``IH010`` topic not allowed, ``IH011`` too
    many, ``IH012`` too large, ``IH013`` a reserved or non-text header); the
    message names the host flag that allows it. The run fails for good whatever
    the handler does next."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message


def _bytes(value: Union[bytes, str, Any]) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":")).encode()


def publish(
    topic: str,
    value: Union[bytes, str, Any],
    key: Optional[Union[bytes, str]] = None,
    headers: Optional[Mapping[str, str]] = None,
) -> None:
    """Publishes a message to ``topic`` once the transaction commits (never if it
    rolls back). ``value`` is bytes, text, or anything else as JSON. The host
    derives its ``message_id`` from the group, the incoming message and the
    position of this call, so a run repeated after a rollback publishes the same
    ids. Messages with the same topic and key arrive in the order published."""
    message = wit.Message(
        topic=topic,
        key=None if key is None else _bytes(key),
        value=_bytes(value),
        headers=[
            types.Header(key=name, value=text.encode())
            for name, text in (headers or {}).items()
        ],
    )
    try:
        wit.publish(message)
    except Err as e:
        raise PublishError(e.value.code, e.value.message) from None
