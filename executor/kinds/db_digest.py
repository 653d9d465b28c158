"""A database's state as a rehearsal compares it: each table's shape and its row set.

Read on the host, in the db process, on the connection that holds the run's transaction (the
host's own statements: SQLite's authorizer lets them by, PostgreSQL's run between the
program's). For each table: its schema, indexes and triggers as the database describes them,
and its rows as a multiset of row hashes, so the order rows come back in never matters, while
storage types do (SQLite's `typeof()` of every value, PostgreSQL's column types in the schema
and each row's text form, where NULL and '' differ). Counters (SQLite's `sqlite_sequence`,
PostgreSQL's sequences) are kept apart: a sequence is not rolled back, and an id handed out
once is never a lost row, so they are reported and never decide a verdict.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

# Rows of one table whose text is kept to name them in a diff; past it a diff counts them.
MAX_NAMED_ROWS = 50_000
MAX_DIFF_ROWS = 20  # rows named per table and side
MAX_ROW_CHARS = 300
_MODULUS = 1 << 128


@dataclass
class TableState:
    schema: str  # columns with their types, indexes, triggers: one text
    rows: Counter[str] = field(default_factory=Counter)  # row hash -> how many times
    # row hash -> what shows the row in a diff (formatted only when a diff names it)
    shown: dict[str, tuple[tuple[str, ...], tuple[object, ...]]] = field(default_factory=dict)


@dataclass
class DbState:
    tables: dict[str, TableState]
    counters: dict[str, int | None]

    def digest(self) -> str:
        """One hash of the tables (not the counters), the same whatever the rows' order: each
        table's row hashes summed (a multiset's sum: duplicates count, order does not)."""
        h = hashlib.sha256()
        for name in sorted(self.tables):
            table = self.tables[name]
            rows = sum(int(row, 16) * count for row, count in table.rows.items()) % _MODULUS
            h.update(f"{name}\0{table.schema}\0{rows:x}\0{table.rows.total()}\0".encode())
        return h.hexdigest()


def compare(before: DbState, after: DbState) -> dict[str, Any]:
    """The verdict's parts: `restored`, the `diff` (which tables, which rows), `counters`."""
    diff: list[dict[str, Any]] = []
    for name in sorted(before.tables.keys() | after.tables.keys()):
        old, new = before.tables.get(name), after.tables.get(name)
        if old is None or new is None:
            diff.append({"table": name, "change": "added" if old is None else "dropped"})
            continue
        if old.schema != new.schema:
            diff.append(
                {"table": name, "change": "schema", "before": old.schema, "after": new.schema}
            )
        if old.rows != new.rows:
            gone, came = old.rows - new.rows, new.rows - old.rows
            diff.append(
                {
                    "table": name,
                    "change": "rows",
                    "missing": sum(gone.values()),
                    "extra": sum(came.values()),
                    "missing_rows": _named(gone, old.shown),
                    "extra_rows": _named(came, new.shown),
                }
            )
    counters = {
        name: {"before": before.counters.get(name), "after": after.counters.get(name)}
        for name in sorted(before.counters.keys() | after.counters.keys())
        if before.counters.get(name) != after.counters.get(name)
    }
    return {
        "restored": not diff,
        "diff": diff,
        "counters": counters,
        "before": before.digest(),
        "after": after.digest(),
    }


def _named(
    rows: Counter[str], shown: dict[str, tuple[tuple[str, ...], tuple[object, ...]]]
) -> list[str]:
    named = []
    for row in sorted(rows)[:MAX_DIFF_ROWS]:
        if row not in shown:
            named.append(f"(row {row[:12]})")
            continue
        columns, values = shown[row]
        text = (
            ", ".join(f"{c}={v!r}" for c, v in zip(columns, values, strict=True))
            if columns
            else str(values[0])
        )
        named.append(text[:MAX_ROW_CHARS])
    return named


def _row_hash(parts: tuple[object, ...]) -> str:
    text = repr(parts).encode("utf-8", "backslashreplace")
    return hashlib.blake2b(text, digest_size=16).hexdigest()


def _add_row(
    table: TableState,
    parts: tuple[object, ...],
    columns: tuple[str, ...],
    values: tuple[object, ...],
) -> None:
    row = _row_hash(parts)
    table.rows[row] += 1
    if len(table.shown) < MAX_NAMED_ROWS:
        table.shown.setdefault(row, (columns, values))


def sqlite_state(conn: sqlite3.Connection) -> DbState:
    """Every table of the main database (the copy the run works on), with its counters."""
    tables: dict[str, TableState] = {}
    names = [
        str(r[0])
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' "
            "ESCAPE '\\' ORDER BY name"
        )
    ]
    for name in names:
        described = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE tbl_name = ? ORDER BY type, name",
            (name,),
        ).fetchall()
        columns = [str(c[1]) for c in conn.execute(f"PRAGMA table_info({_sqlite_quote(name)})")]
        table = TableState(schema="\n".join(f"{t} {n}: {s}" for t, n, s in described))
        if columns:
            # Identifiers the database itself listed, quoted: no value is ever spliced in.
            selected = ", ".join(f"typeof({q}), {q}" for q in map(_sqlite_quote, columns))
            query = f"SELECT {selected} FROM {_sqlite_quote(name)}"  # noqa: S608
            column_names = tuple(columns)
            for values in conn.execute(query):
                _add_row(table, tuple(values), column_names, tuple(values[1::2]))
        tables[name] = table
    counters: dict[str, int | None] = {}
    has_sequence = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'"
    ).fetchone()
    if has_sequence:
        for name, seq in conn.execute("SELECT name, seq FROM sqlite_sequence"):
            counters[f"sqlite_sequence.{name}"] = int(seq) if seq is not None else None
    return DbState(tables, counters)


def _sqlite_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_PG_TABLES = """
SELECT c.oid, n.nspname, c.relname FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\\_%%' AND pg_catalog.has_table_privilege(c.oid, 'SELECT')
ORDER BY n.nspname, c.relname
"""
_PG_SHAPE = """
SELECT 'column ' || a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
       || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
       || COALESCE(' default ' || pg_catalog.pg_get_expr(d.adbin, d.adrelid), '')
FROM pg_catalog.pg_attribute a
LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = %(oid)s AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'index ' || pg_catalog.pg_get_indexdef(i.indexrelid)
FROM pg_catalog.pg_index i WHERE i.indrelid = %(oid)s
UNION ALL
SELECT 'constraint ' || conname || ' ' || pg_catalog.pg_get_constraintdef(oid)
FROM pg_catalog.pg_constraint WHERE conrelid = %(oid)s
UNION ALL
SELECT 'trigger ' || pg_catalog.pg_get_triggerdef(oid)
FROM pg_catalog.pg_trigger WHERE tgrelid = %(oid)s AND NOT tgisinternal
"""
_PG_SEQUENCES = """
SELECT schemaname || '.' || sequencename, last_value FROM pg_catalog.pg_sequences
WHERE schemaname NOT IN ('pg_catalog', 'information_schema')
  AND pg_catalog.has_sequence_privilege(
        pg_catalog.quote_ident(schemaname) || '.' || pg_catalog.quote_ident(sequencename),
        'SELECT')
"""


def postgres_state(conn: psycopg.Connection, *, only: set[str] | None = None) -> DbState:
    """The tables this role can read outside the system schemas (or just `only`, by
    `schema.table`), and every readable sequence's last value."""
    tables: dict[str, TableState] = {}
    with conn.cursor() as cur:
        found = cur.execute(_PG_TABLES).fetchall()
        for oid, schema, name in found:
            key = f"{schema}.{name}"
            if only is not None and key not in only:
                continue
            shape = sorted(str(r[0]) for r in cur.execute(_PG_SHAPE, {"oid": oid}))
            table = TableState(schema="\n".join(shape))
            relation = sql.Identifier(schema, name)
            # The row's text form: NULL is empty, '' is "", so an UPDATE that loses NULLs shows.
            query = sql.SQL("SELECT t::text FROM {} AS t").format(relation)
            for (text,) in cur.execute(query):
                _add_row(table, (text,), (), (text,))
            tables[key] = table
        counters: dict[str, int | None] = {
            str(name): None if value is None else int(value)
            for name, value in cur.execute(_PG_SEQUENCES)
        }
    return DbState(tables, counters)


__all__ = ["DbState", "TableState", "compare", "postgres_state", "sqlite_state"]
