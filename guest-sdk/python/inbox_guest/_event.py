"""The message being handled."""

import json
from dataclasses import dataclass
from typing import Any, List, Optional

from ._errors import HandlerError


@dataclass(frozen=True)
class Header:
    """One Kafka record header; ``value`` is ``None`` for a null header."""

    key: str
    value: Optional[bytes]


@dataclass(frozen=True)
class Event:
    """A Kafka record and its inbox key."""

    message_id: str
    """The inbox key (with the consumer group): stable across redeliveries."""
    topic: str
    partition: int
    offset: int
    key: Optional[bytes]
    headers: List[Header]
    payload: bytes
    """The record value; empty for a null (tombstone) value."""

    def text(self) -> str:
        """The payload as UTF-8 text; a payload that is not is a fatal error."""
        try:
            return self.payload.decode("utf-8")
        except UnicodeDecodeError as e:
            raise HandlerError(f"payload is not UTF-8 text: {e}") from None

    def json(self) -> Any:
        """The payload parsed as JSON; a payload that is not is a fatal error."""
        try:
            return json.loads(self.payload)
        except (ValueError, UnicodeDecodeError) as e:
            raise HandlerError(f"payload is not JSON: {e}") from None

    def header(self, key: str) -> Optional[bytes]:
        """The value of the first header named ``key`` (``None``: absent or null)."""
        for header in self.headers:
            if header.key == key:
                return header.value
        return None


def from_wit(event: Any) -> Event:
    return Event(
        message_id=event.message_id,
        topic=event.topic,
        partition=event.partition,
        offset=event.offset,
        key=None if event.key is None else bytes(event.key),
        headers=[
            Header(h.key, None if h.value is None else bytes(h.value))
            for h in event.headers
        ],
        payload=bytes(event.payload),
    )
