"""Calls in the handler: a request sent while the message's transaction is
open, whose answer the handler can record in it. It goes out through the
standard ``wasi:http/outgoing-handler`` (these are its componentize-py
bindings), which the host sends through its gate with an ``Idempotency-Key``
derived from the group, the incoming message and the call's position."""

import json as _json
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Tuple
from urllib.parse import urlsplit

from componentize_py_types import Err
from wit_world.imports import outgoing_handler
from wit_world.imports import wasi_http_types as http
from wit_world.imports.streams import StreamError_Closed

from ._errors import HandlerError
from ._requests import encode

_CHUNK = 4096
_METHODS = {
    "GET": http.Method_Get(),
    "HEAD": http.Method_Head(),
    "POST": http.Method_Post(),
    "PUT": http.Method_Put(),
    "PATCH": http.Method_Patch(),
    "DELETE": http.Method_Delete(),
}


class CallError(HandlerError):
    """A call that got no answer (refused by the host, no connection, a
    timeout, an answer over ``--http-max-response-bytes``). Retryable when no
    answer came: running the message again repeats the call with the same key.
    A call the host refused fails the run for good whatever the handler does."""


@dataclass(frozen=True)
class Response:
    """What came back: any status is an answer, not an error."""

    status: int
    headers: List[Tuple[str, str]]
    body: bytes

    @property
    def ok(self) -> bool:
        """Whether the status is 2xx."""
        return 200 <= self.status < 300

    def header(self, name: str) -> Optional[str]:
        """The first value of header ``name`` (any case)."""
        name = name.lower()
        return next((v for n, v in self.headers if n.lower() == name), None)

    def json(self) -> Any:
        """The body parsed as JSON; a fatal ``HandlerError`` when it is not."""
        try:
            return _json.loads(self.body)
        except ValueError as e:
            raise HandlerError(
                f"the answer (status {self.status}) is not JSON: {e}"
            ) from None


def call(
    method: str,
    url: str,
    *,
    headers: Optional[Mapping[str, str]] = None,
    body: Optional[bytes] = None,
    json: Any = None,
) -> Response:
    """Sends a request now and waits for its answer; the transaction stays open
    meanwhile, and the wait counts against ``--guest-deadline-ms``. A run that
    rolls back and runs again repeats the same keys in the same order, so a
    receiver that honours ``Idempotency-Key`` applies the call once."""
    pairs, payload = encode(headers, body, json)
    verb = _METHODS.get(method.upper())
    if verb is None:
        raise CallError(f"method {method!r} is not one of {', '.join(_METHODS)}")
    parts = urlsplit(url)
    scheme = {"https": http.Scheme_Https(), "http": http.Scheme_Http()}.get(parts.scheme)
    if scheme is None or not parts.netloc:
        raise CallError(f"{url!r} is not an absolute http(s) URL")
    try:
        fields = http.Fields.from_list(
            [(name.lower(), value.encode()) for name, value in pairs]
        )
    except Err as e:
        raise CallError(
            f"a header is refused ({e.value}): idempotency-key, host and the "
            "connection's headers are the host's"
        ) from None
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    # The request and its fields are handed over (to the request, then to
    # wasi:http), so neither is dropped here; children go before their parents.
    request = http.OutgoingRequest(fields)
    try:
        request.set_method(verb)
        request.set_scheme(scheme)
        request.set_authority(parts.netloc)
        request.set_path_with_query(path)
    except Err:
        raise CallError(f"{method} {url} is not a request wasi:http can make") from None
    outgoing = request.body()
    try:
        pending = outgoing_handler.handle(request, None)
    except Err as e:
        raise _failed(e.value) from None
    with pending:
        _write(outgoing, payload)
        with pending.subscribe() as ready:
            ready.block()
        answer = pending.get()
    outcome = answer.value if answer is not None else None
    if isinstance(outcome, Err):
        raise _failed(outcome.value)
    with outcome.value as incoming:
        status = incoming.status()
        with incoming.headers() as fields:
            listed = [(n, v.decode("utf-8", "replace")) for n, v in fields.entries()]
        with incoming.consume() as content:
            return Response(status, listed, _read(content))


def _write(outgoing: "http.OutgoingBody", payload: bytes) -> None:
    try:
        with outgoing.write() as stream:
            for start in range(0, len(payload), _CHUNK):
                stream.blocking_write_and_flush(payload[start : start + _CHUNK])
        http.OutgoingBody.finish(outgoing, None)
    except Err as e:
        raise CallError(f"the request body could not be sent: {e.value}") from None


def _read(content: "http.IncomingBody") -> bytes:
    chunks = []
    with content.stream() as stream:
        while True:
            try:
                chunks.append(stream.blocking_read(_CHUNK))
            except Err as e:
                if isinstance(e.value, StreamError_Closed):
                    break
                raise CallError(f"the answer's body broke off: {e.value}") from None
    return b"".join(chunks)


def _failed(code: Any) -> CallError:
    """Retryable only when no answer came (the same rule as the Rust SDK's)."""
    if isinstance(code, http.ErrorCode_HttpRequestDenied):
        return CallError(
            "call failed: the host refused the call (its log and the record's "
            "failure say which rule)"
        )
    if isinstance(code, http.ErrorCode_HttpResponseBodySize):
        return CallError(
            "call failed: the answer is longer than the host reads "
            "(--http-max-response-bytes)"
        )
    return CallError(f"call failed: no answer: {code}", retryable=True)
