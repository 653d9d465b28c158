"""How the db change list words a statement's outcome.

The broker reports a statement without result columns as "N row(s) affected", and the drivers
give N = -1 when a statement has no row count (DDL: CREATE TABLE, DROP INDEX ...). A negative
count means nothing to a person, so such a statement is named by what it did, read from its
first keywords with PostgreSQL's own lexer (pglast's scan, which builds no tree).
"""

from __future__ import annotations

from pglast.parser import ParseError, scan

# Only the statement's head is read: enough for "CREATE UNIQUE INDEX IF NOT EXISTS".
_HEAD_CHARS = 120
_VERBS = {"CREATE": "created", "DROP": "dropped", "ALTER": "altered", "TRUNCATE": "truncated"}
_OBJECTS = {
    "TABLE": "table",
    "INDEX": "index",
    "VIEW": "view",
    "TRIGGER": "trigger",
    "SEQUENCE": "sequence",
    "SCHEMA": "schema",
    "TYPE_P": "type",
    "FUNCTION": "function",
    "EXTENSION": "extension",
}


def statement_outcome(sql: str, outcome: str) -> str:
    """`outcome` as the broker wrote it, unless it is a negative row count: then what the
    statement did ("table created"), or "done" when its head names nothing known."""
    count, _, rest = outcome.partition(" ")
    if rest != "row(s) affected" or not count.lstrip("-").isdigit() or int(count) >= 0:
        return outcome
    return _what_it_did(sql) or "done"


def _what_it_did(sql: str) -> str:
    try:
        names = [token.name for token in scan(sql[:_HEAD_CHARS])]
    except ParseError:  # a quote left open in the cut head: say nothing more specific
        return ""
    if not names or names[0] not in _VERBS:
        return ""
    verb = _VERBS[names[0]]
    if names[0] == "TRUNCATE":
        return "table truncated"
    thing = next((_OBJECTS[name] for name in names[1:] if name in _OBJECTS), "")
    return f"{thing} {verb}" if thing else verb
