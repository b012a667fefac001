"""HTTP requests: sent once the transaction commits (``send_after_commit``), or
now, with the answer in hand (``call``, in ``_calls``). Both go through the
host's gate (``--http-allow``) with an ``Idempotency-Key`` the host derives from
the group, the incoming message and the position of the request in the run."""

import json
from typing import Any, List, Mapping, Optional, Tuple

from componentize_py_types import Err
from wit_world.imports import inbox_host_types as types
from wit_world.imports import requests as wit


class RequestError(Exception):
    """A request the host refused (``IH020`` URL or method not allowed,
    ``IH021`` too many, ``IH022`` too large, ``IH023`` a header the host sets or
    cannot store); the message names the host flag that allows it. The run
    fails for good whatever the handler does next."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message


def encode(
    headers: Optional[Mapping[str, str]], body: Optional[bytes], json_body: Any
) -> Tuple[List[Tuple[str, str]], bytes]:
    """The headers and body of a request: ``json`` (any value but ``None``)
    becomes the body with ``content-type: application/json``."""
    pairs = list((headers or {}).items())
    if json_body is not None:
        if body is not None:
            raise ValueError("give a request body or json, not both")
        pairs.append(("content-type", "application/json"))
        return pairs, json.dumps(json_body, separators=(",", ":")).encode()
    if isinstance(body, str):
        return pairs, body.encode()
    return pairs, bytes(body or b"")


def send_after_commit(
    method: str,
    url: str,
    *,
    headers: Optional[Mapping[str, str]] = None,
    body: Optional[bytes] = None,
    json: Any = None,
    ordering_key: Optional[str] = None,
    reply_topic: Optional[str] = None,
) -> str:
    """Asks for a request to be sent once the transaction commits (never if it
    rolls back); returns the ``Idempotency-Key`` it will carry, the same on
    every resend and every run of this message. Requests with the same
    ``ordering_key`` are sent one after another in the order written; with a
    ``reply_topic`` (allowed by ``--publish-topic``) the answer is published
    there. Raises ``RequestError`` when the host refuses it."""
    pairs, payload = encode(headers, body, json)
    request = wit.Request(
        method=method,
        url=url,
        headers=[types.Header(key=name, value=value.encode()) for name, value in pairs],
        body=payload,
        ordering_key=ordering_key,
        reply_topic=reply_topic,
    )
    try:
        return wit.send_after_commit(request)
    except Err as e:
        raise RequestError(e.value.code, e.value.message) from None
