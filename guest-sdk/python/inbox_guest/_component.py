"""The component's ``handle`` export: calls ``handle(event, db)`` from the
plugin's ``handler.py`` and reports how it ended. ``inbox-host build`` names
this module as the application when it runs componentize-py."""

import handler as _plugin
import wit_world
from componentize_py_types import Err
from wit_world.imports import inbox_host_types as types

from ._db import Db, DbError
from ._errors import HandlerError
from ._event import from_wit
from ._outbox import PublishError
from ._requests import RequestError

_handle = getattr(_plugin, "handle", None)
if not callable(_handle):
    raise ImportError("handler.py must define handle(event, db)")


class WitWorld(wit_world.WitWorld):
    def handle(self, event: types.Event) -> None:
        try:
            _handle(from_wit(event), Db())
        except HandlerError as e:
            raise Err(types.HandlerError(message=e.message, retryable=e.retryable))
        except DbError as e:
            raise Err(types.HandlerError(message=str(e), retryable=e.retryable))
        except (PublishError, RequestError) as e:
            raise Err(types.HandlerError(message=str(e), retryable=False))
