"""What the database sessions share: the reply shape, JSON-safe values, capped rows, verdicts.

The sandboxed program proposes one statement per call; a session (db_sqlite, db_postgres,
db_mariadb) checks it, runs it so a failing statement alone is undone and the transaction
stays usable,
and answers with capped, JSON-safe rows. Nothing but StatementRefused / StatementFailed
leaves a statement call, whatever text and parameters arrive.
"""

from __future__ import annotations

import base64
import datetime
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from executor.kinds.errors import StatementFailed, StatementRefused

JsonValue = None | bool | int | float | str | dict | list  # bytes travel as {"$bytes": b64}
Params = list | dict | None


@dataclass(frozen=True)
class Reply:
    columns: list[str] | None  # None for statements that return no rows
    rows: list[list[JsonValue]]
    rowcount: int
    truncated: bool  # more rows existed than max_rows / max_reply_bytes allowed
    lastrowid: int | None = None

    def message(self) -> dict[str, Any]:
        """As sent on: to the sandbox's client (db_broker) and to the web process (db_child)."""
        return {
            "ok": True,
            "columns": self.columns,
            "rows": self.rows,
            "rowcount": self.rowcount,
            "truncated": self.truncated,
            "lastrowid": self.lastrowid,
        }


class DbSession(Protocol):
    engine: str  # "sqlite" | "postgres" | "mariadb"

    def execute(self, sql: str, params: Params = None) -> Reply: ...

    def executemany(self, sql: str, seq: list[list | dict]) -> Reply: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def close(self) -> None: ...

    def cancel(self) -> None:
        """End the statement in flight, if any: it fails, the transaction stays usable.

        Callable from any thread while another is inside execute(); returns within a bounded
        time, once that statement no longer holds the session (a PostgreSQL statement that
        ignores its cancel loses its connection, and with it the transaction)."""
        ...


# Values ---------------------------------------------------------------------------------------


def to_json(value: object) -> tuple[JsonValue, int]:
    """A JSON-safe form of a database value and roughly how many bytes it costs encoded."""
    if value is None or isinstance(value, bool):
        return value, 5
    if isinstance(value, int):
        return value, 20
    if isinstance(value, float):
        return (value, 24) if math.isfinite(value) else (str(value), 10)
    if isinstance(value, str):
        return value, len(value) + 2
    if isinstance(value, bytes | bytearray | memoryview):
        encoded = base64.b64encode(bytes(value)).decode("ascii")
        return {"$bytes": encoded}, len(encoded) + 14
    if isinstance(value, list | tuple):  # arrays (PostgreSQL caps their dimensions) and records
        items = [to_json(item) for item in value]
        return [item for item, _ in items], sum(size for _, size in items) + 2
    text = value.isoformat() if isinstance(value, datetime.date | datetime.time) else str(value)
    return text, len(text) + 2


def from_json(value: object) -> object:
    """A parameter as the program sent it, with {"$bytes": b64} back as bytes."""
    if isinstance(value, dict):
        if set(value) == {"$bytes"} and isinstance(value["$bytes"], str):
            return base64.b64decode(value["$bytes"], validate=True)
        raise StatementFailed("a parameter may be null, a number, text, a list or bytes")
    if isinstance(value, list):
        return [from_json(item) for item in value]
    return value


def driver_params(params: Params) -> Sequence[object] | dict[str, object] | None:
    if params is None:
        return None
    if isinstance(params, dict):
        return {str(key): from_json(item) for key, item in params.items()}
    if isinstance(params, list | tuple):
        return [from_json(item) for item in params]
    raise StatementFailed("parameters must be a list or an object")


class Rows:
    """Rows kept for the reply: at most max_rows, at most max_bytes of encoded values."""

    def __init__(self, max_rows: int, max_bytes: int) -> None:
        self.max_rows, self.max_bytes = max_rows, max_bytes
        self.rows: list[list[JsonValue]] = []
        self.seen = 0
        self.size = 0
        self.truncated = False

    def add(self, row: Iterable[object]) -> None:
        self.seen += 1
        if self.truncated:
            return
        if len(self.rows) >= self.max_rows:
            self.truncated = True
            return
        values = [to_json(value) for value in row]
        size = sum(cost for _, cost in values) + 2
        if self.size + size > self.max_bytes:
            self.truncated = True
            return
        self.size += size
        self.rows.append([value for value, _ in values])


def guarded(call: Callable[[], Reply]) -> Reply:
    """Only the two policy errors leave a statement call, whatever the program sent."""
    try:
        return call()
    except (StatementRefused, StatementFailed):
        raise
    except Exception as exc:  # untrusted input: a surprise here is the statement's failure
        raise StatementFailed(f"the statement could not run: {type(exc).__name__}") from None


class Verdicts:
    """A policy's verdict per exact statement text, for one session: a loop parses once.

    Keyed by the whole text, never a digest of it; only acceptances are kept (a refusal
    raises), and `check` is called at every miss (a session passes a lambda that looks its
    policy up by name, so a sabotage test's patch of that name takes effect).
    """

    def __init__(self, check: Callable[[str], bool], size: int = 512, max_chars: int = 16_384):
        self._check = check
        self._size, self._max_chars = size, max_chars
        self._seen: OrderedDict[str, bool] = OrderedDict()

    def returns_rows(self, text: str) -> bool:
        verdict = self._seen.get(text)
        if verdict is not None:
            self._seen.move_to_end(text)
            return verdict
        verdict = self._check(text)
        if len(text) <= self._max_chars:
            self._seen[text] = verdict
            if len(self._seen) > self._size:
                self._seen.popitem(last=False)
        return verdict
