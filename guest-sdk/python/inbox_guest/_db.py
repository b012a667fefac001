"""SQL inside the message's transaction, with Python values in and out."""

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, Iterator, List, Sequence, Union

from componentize_py_types import Err
from wit_world.imports import db as wit

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_INT64 = range(-(2**63), 2**63)


class DbError(Exception):
    """A failed statement: the SQLSTATE (or an ``IH`` code when the host refused
    the statement before it ran), the message, and whether running the message
    again can succeed, as the host judged it (every guest language reads the
    same rule). After PostgreSQL rejects a statement the transaction is
    aborted: catching this error does not let the handler commit."""

    def __init__(self, code: str, message: str, retryable: bool) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable = retryable


@dataclass(frozen=True)
class Json:
    """A parameter bound as ``jsonb`` (dicts and lists are bound so too)."""

    value: Any


@dataclass(frozen=True)
class Timestamp:
    """Microseconds since 1970-01-01T00:00:00Z: a ``timestamptz`` parameter,
    and what a column reads as when it is outside Python's datetime range."""

    micros: int


class Row:
    """One row: values by column name (``row["id"]``) or position (``row[0]``)."""

    __slots__ = ("_columns", "_values")

    def __init__(self, columns: Dict[str, int], values: List[Any]) -> None:
        self._columns = columns
        self._values = values

    def __getitem__(self, column: Union[str, int]) -> Any:
        if isinstance(column, int):
            return self._values[column]
        try:
            return self._values[self._columns[column]]
        except KeyError:
            raise KeyError(
                f"no column {column!r}; the row has {list(self._columns)}"
            ) from None

    def get(self, column: str, default: Any = None) -> Any:
        index = self._columns.get(column)
        return default if index is None else self._values[index]

    def as_dict(self) -> Dict[str, Any]:
        return {name: self._values[i] for name, i in self._columns.items()}

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Row({self.as_dict()!r})"


class Rows:
    """The rows a query returned, in order."""

    def __init__(self, columns: List[str], rows: List[Row]) -> None:
        self.columns = columns
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[Row]:
        return iter(self._rows)

    def __getitem__(self, index: int) -> Row:
        return self._rows[index]

    def __repr__(self) -> str:
        return f"Rows({self._rows!r})"


class Db:
    """The message's PostgreSQL transaction. Parameters are ``$1, $2, …``:
    ``None``, ``bool``, ``int`` (bound as ``int8``), ``float``, ``str``,
    ``bytes``, ``dict``/``list``/``Json`` (``jsonb``), an aware ``datetime`` or
    ``Timestamp`` (``timestamptz``)."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Runs one statement; returns the number of rows it affected."""
        try:
            return wit.execute(sql, [_to_value(p) for p in params])
        except Err as e:
            raise _db_error(e) from None

    def query(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        """Runs one statement and returns the rows it produced."""
        try:
            result = wit.query(sql, [_to_value(p) for p in params])
        except Err as e:
            raise _db_error(e) from None
        names = {name: i for i, name in enumerate(result.columns)}
        rows = [Row(names, [_from_value(v) for v in row]) for row in result.rows]
        return Rows(list(result.columns), rows)


def _db_error(e: Err) -> DbError:
    error = e.value
    return DbError(error.code, error.message, error.retryable)


def _to_value(value: Any) -> "wit.Value":
    # bool first: it is a subclass of int.
    if value is None:
        return wit.Value_Null()
    if isinstance(value, bool):
        return wit.Value_Boolean(value)
    if isinstance(value, int):
        if value not in _INT64:
            raise TypeError(f"integer {value} does not fit in int8; pass it as str")
        return wit.Value_Int64(value)
    if isinstance(value, float):
        return wit.Value_Float64(value)
    if isinstance(value, str):
        return wit.Value_Text(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return wit.Value_Bytes(bytes(value))
    if isinstance(value, Json):
        return wit.Value_Json(json.dumps(value.value))
    if isinstance(value, (dict, list)):
        return wit.Value_Json(json.dumps(value))
    if isinstance(value, Timestamp):
        return wit.Value_Timestamp(value.micros)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise TypeError("a naive datetime has no time zone; give it tzinfo")
        return wit.Value_Timestamp((value - _EPOCH) // timedelta(microseconds=1))
    raise TypeError(
        f"cannot bind a {type(value).__name__} as a SQL parameter "
        "(None, bool, int, float, str, bytes, dict, list, Json, datetime, Timestamp)"
    )


def _from_value(value: "wit.Value") -> Any:
    if isinstance(value, wit.Value_Null):
        return None
    if isinstance(value, wit.Value_Json):
        return json.loads(value.value)
    if isinstance(value, wit.Value_Timestamp):
        try:
            return _EPOCH + timedelta(microseconds=value.value)
        except OverflowError:
            return Timestamp(value.value)
    if isinstance(value, wit.Value_Bytes):
        return bytes(value.value)
    return value.value
