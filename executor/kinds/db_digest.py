"""A database's state as a rehearsal compares it: each table's shape and, for the tables the
programs touched, its row set.

Read on the host, in the db process (the host's own statements: SQLite's authorizer lets them
by, PostgreSQL's run between the program's). Every table's schema, indexes and triggers as the
database describes them are read (a few catalog rows); the rows only of the tables the programs
may have changed (the session says which: db_sqlite.py, db_postgres.py), each row as one text
the database itself renders, counted as a multiset: the order rows come back in never matters,
storage types do (SQLite's `quote()` of every value: 1, 1.0, '1' and X'31' differ;
PostgreSQL's column types in the schema and each row's text form, where NULL and '' differ).
Counters (SQLite's `sqlite_sequence`, PostgreSQL's sequences) are kept apart: a sequence is not
rolled back, and an id handed out once is never a lost row, so they are reported and never
decide a verdict.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

MAX_DIFF_ROWS = 20  # rows named per table and side
MAX_ROW_CHARS = 300  # a row's text kept whole; a longer one is kept as its hash and a prefix
_LONG_ROW_PREFIX = 200


@dataclass
class TableState:
    schema: str  # columns with their types, indexes, triggers: one text
    # Each row's text -> how many times (None: the rows were not read, the table was not
    # touched). A row longer than MAX_ROW_CHARS is `#<hash> <its first characters>`.
    rows: Counter[bytes] | None = None
    columns: tuple[str, ...] = ()  # how a diff names a row's values

    def digest_part(self) -> bytes:
        h = hashlib.sha256(self.schema.encode("utf-8", "backslashreplace"))
        if self.rows is None:
            h.update(b"\0rows not read")
        else:  # no row text holds a NUL (see the readers), so the joined text is exact
            h.update(b"\0rows\0" + b"\0".join(sorted(self.rows.elements())))
        return h.digest()


@dataclass
class DbState:
    tables: dict[str, TableState]
    counters: dict[str, int | None] = field(default_factory=dict)

    def digest(self) -> str:
        """One hash of the tables (not the counters), the same whatever the rows' order."""
        h = hashlib.sha256()
        for name in sorted(self.tables):
            h.update(name.encode("utf-8", "backslashreplace") + b"\0")
            h.update(self.tables[name].digest_part())
        return h.hexdigest()


def shape_changes(before: dict[str, str], after: dict[str, str]) -> set[str]:
    """The tables added, dropped or whose schema moved, by name -> schema text."""
    return {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}


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
        if old.rows is None or new.rows is None:
            if old.rows is not new.rows:  # one side read and not the other: never "the same"
                diff.append({"table": name, "change": "rows", "missing": 0, "extra": 0})
            continue
        if old.rows != new.rows:
            gone, came = old.rows - new.rows, new.rows - old.rows
            diff.append(
                {
                    "table": name,
                    "change": "rows",
                    "missing": gone.total(),
                    "extra": came.total(),
                    "missing_rows": _named(gone, old.columns),
                    "extra_rows": _named(came, new.columns),
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


def _named(rows: Counter[bytes], columns: tuple[str, ...]) -> list[str]:
    """SQLite's rows as `(a, b) = (1, 'x')`; PostgreSQL's as their row text `(1,x)`."""
    named = []
    for row in sorted(rows)[:MAX_DIFF_ROWS]:
        text = row.decode("utf-8", "backslashreplace")
        if text.startswith("#"):  # a long row: its hash, then its first characters
            digest, _, prefix = text.partition(" ")
            text, after = prefix + "...", f" {digest[:13]}"
        else:
            after = ""
        if columns:
            text = f"({', '.join(columns)}) = ({text})"
        named.append(text[:MAX_ROW_CHARS] + after)
    return named


def _long_row(text: bytes) -> bytes:
    """A row's key when its text is past MAX_ROW_CHARS: its hash, then its first bytes. Never
    mistaken for a whole row's text, which starts with a value (a digit, a sign, a quote,
    X, N, I or T), never with #."""
    digest = hashlib.blake2b(text, digest_size=16).hexdigest().encode()
    return b"#" + digest + b" " + text[:_LONG_ROW_PREFIX]


def _counted(rows: Iterable[tuple[bytes]]) -> Counter[bytes]:
    return Counter(row for (row,) in rows)


def sqlite_shapes(conn: sqlite3.Connection) -> dict[str, str]:
    """Every table's and view's schema in the main database (the copy the run works on): its
    own text and its indexes' and triggers', one text per name. A few catalog rows."""
    found: dict[str, list[str]] = {}
    for tbl_name, kind, name, text in conn.execute(
        "SELECT tbl_name, type, name, sql FROM sqlite_master "
        "WHERE tbl_name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY tbl_name, type, name"
    ):
        found.setdefault(_text(tbl_name), []).append(f"{_text(kind)} {_text(name)}: {_text(text)}")
    return {name: "\n".join(lines) for name, lines in found.items()}


def sqlite_counters(conn: sqlite3.Connection) -> dict[str, int | None]:
    counters: dict[str, int | None] = {}
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'").fetchone():
        for name, seq in conn.execute("SELECT name, seq FROM sqlite_sequence"):
            counters[f"sqlite_sequence.{_text(name)}"] = int(seq) if seq is not None else None
    return counters


def sqlite_state(conn: sqlite3.Connection, *, rows_of: set[str] | None = None) -> DbState:
    """Every table's shape and the counters; the rows of the tables in `rows_of` (None: all).
    Read with the connection's text as bytes, so text that is not valid UTF-8 stays exact."""
    shapes = sqlite_shapes(conn)
    real = {
        _text(name)
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
        )
    }
    tables: dict[str, TableState] = {}
    for name, schema in shapes.items():
        table = TableState(schema)
        if name in real and (rows_of is None or name in rows_of):
            table.columns, table.rows = _sqlite_rows(conn, name)
        tables[name] = table
    return DbState(tables, sqlite_counters(conn))


def sqlite_virtual_shadows(conn: sqlite3.Connection, names: set[str]) -> set[str]:
    """The shadow tables a virtual table of `names` keeps its data in (fts5's `<name>_data`,
    ...): its module writes them itself, without naming them to the authorizer."""
    virtual = {
        _text(name)
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL%'"
        )
    } & names
    if not virtual:
        return set()
    tables = [_text(n) for (n,) in conn.execute("SELECT name FROM sqlite_master")]
    return {t for t in tables for v in virtual if t.startswith(v + "_")}


def _sqlite_rows(conn: sqlite3.Connection, name: str) -> tuple[tuple[str, ...], Counter[bytes]]:
    """Each row as the database renders it: its values' `quote()`s, which keep the storage
    type (1, 1.0, '1', X'31', NULL). A text holding a NUL, which quote() would cut there, goes
    as its bytes (TX'..'). The values are self-delimiting, so the row's text is exact."""
    table = _sqlite_quote(name)
    columns = tuple(_text(c[1]) for c in conn.execute(f"PRAGMA table_info({table})"))
    if not columns:
        return columns, Counter()
    rendered = " || ', ' || ".join(_sqlite_value(_sqlite_quote(c)) for c in columns)
    # Identifiers the database itself listed, quoted: no value is ever spliced in.
    query = f"SELECT {rendered} FROM {table}"  # noqa: S608
    rows: Counter[bytes] = Counter()
    for (row,) in conn.execute(query):
        rows[row if len(row) <= MAX_ROW_CHARS else _long_row(row)] += 1
    return columns, rows


def _sqlite_value(column: str) -> str:
    return (
        f"CASE WHEN typeof({column}) = 'text' AND instr({column}, char(0)) "
        f"THEN 'T' || quote(CAST({column} AS BLOB)) ELSE quote({column}) END"
    )


def _text(value: object) -> str:
    """A catalog value read as bytes (the state's connection), as text."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return "" if value is None else str(value)


def _sqlite_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_PG_TABLES = """
SELECT c.oid, n.nspname, c.relname, c.relfilenode FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\\_%%' AND pg_catalog.has_table_privilege(c.oid, 'SELECT')
"""
_PG_SHAPES = """
SELECT a.attrelid, 'column ' || a.attname || ' '
       || pg_catalog.format_type(a.atttypid, a.atttypmod)
       || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
       || COALESCE(' default ' || pg_catalog.pg_get_expr(d.adbin, d.adrelid), '')
FROM pg_catalog.pg_attribute a
LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = ANY(%(oids)s) AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT i.indrelid, 'index ' || pg_catalog.pg_get_indexdef(i.indexrelid)
FROM pg_catalog.pg_index i WHERE i.indrelid = ANY(%(oids)s)
UNION ALL
SELECT conrelid, 'constraint ' || conname || ' ' || pg_catalog.pg_get_constraintdef(oid)
FROM pg_catalog.pg_constraint WHERE conrelid = ANY(%(oids)s)
UNION ALL
SELECT tgrelid, 'trigger ' || pg_catalog.pg_get_triggerdef(oid)
FROM pg_catalog.pg_trigger WHERE tgrelid = ANY(%(oids)s) AND NOT tgisinternal
"""
_PG_SEQUENCES = """
SELECT schemaname || '.' || sequencename, last_value FROM pg_catalog.pg_sequences
WHERE schemaname NOT IN ('pg_catalog', 'information_schema')
  AND pg_catalog.has_sequence_privilege(
        pg_catalog.quote_ident(schemaname) || '.' || pg_catalog.quote_ident(sequencename),
        'SELECT')
"""
# Tables whose rows this transaction has written so far, however: the programs' statements,
# and what their triggers, rules, functions and foreign-key actions wrote.
_PG_WRITTEN = """
SELECT schemaname || '.' || relname FROM pg_catalog.pg_stat_xact_user_tables
WHERE n_tup_ins + n_tup_upd + n_tup_del > 0
"""
# Each row's text form (NULL is empty, '' is ""), or a long one's SHA-256 and first characters.
_PG_ROWS = (
    "SELECT CASE WHEN length(t::text) <= {short} THEN t::text ELSE '#' || "
    "pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(t::text, 'UTF8')), 'hex') "
    "|| ' ' || pg_catalog.left(t::text, {prefix}) END FROM {table} AS t"
)


@dataclass(frozen=True)
class PostgresCatalog:
    """What a PostgreSQL state's catalog says, cheap to read: every readable table's shape
    and storage file (a TRUNCATE or a rewrite gives a new one), and the sequences."""

    shapes: dict[str, str]
    files: dict[str, int]
    counters: dict[str, int | None]
    names: dict[str, tuple[str, str]]  # `schema.table` -> (schema, table)


def postgres_catalog(conn: psycopg.Connection) -> PostgresCatalog:
    with conn.cursor() as cur:
        found = cur.execute(_PG_TABLES).fetchall()
        names = {f"{schema}.{name}": (str(schema), str(name)) for _, schema, name, _ in found}
        oids = {f"{schema}.{name}": int(oid) for oid, schema, name, _ in found}
        files = {f"{schema}.{name}": int(node) for _, schema, name, node in found}
        lines: dict[int, list[str]] = {}
        for oid, line in cur.execute(_PG_SHAPES, {"oids": list(oids.values())}):
            lines.setdefault(int(oid), []).append(str(line))
        counters: dict[str, int | None] = {
            str(name): None if value is None else int(value)
            for name, value in cur.execute(_PG_SEQUENCES)
        }
    shapes = {key: "\n".join(sorted(lines.get(oid, []))) for key, oid in oids.items()}
    return PostgresCatalog(shapes, files, counters, names)


def postgres_written(conn: psycopg.Connection) -> set[str]:
    with conn.cursor() as cur:
        return {str(name) for (name,) in cur.execute(_PG_WRITTEN)}


def postgres_touched(begun: PostgresCatalog, now: PostgresCatalog, written: set[str]) -> set[str]:
    """The tables a rehearsal reads the rows of: written to, or whose shape or storage file
    moved, or that came or went."""
    both = begun.files.keys() & now.files.keys()
    moved = {key for key in both if begun.files[key] != now.files[key]}
    return written | moved | shape_changes(begun.shapes, now.shapes)


def postgres_state(
    conn: psycopg.Connection, catalog: PostgresCatalog, rows_of: set[str]
) -> DbState:
    """The tables of `catalog` (its shapes, its counters), with the rows of those in
    `rows_of` read on `conn` (whose snapshot says which state)."""
    tables: dict[str, TableState] = {}
    with conn.cursor() as cur:
        for key, schema in catalog.shapes.items():
            table = TableState(schema)
            if key in rows_of:
                query = sql.SQL(_PG_ROWS).format(
                    short=sql.Literal(MAX_ROW_CHARS),
                    prefix=sql.Literal(_LONG_ROW_PREFIX),
                    table=sql.Identifier(*catalog.names[key]),
                )
                table.rows = _counted((text.encode(),) for (text,) in cur.execute(query))
            tables[key] = table
    return DbState(tables, dict(catalog.counters))


__all__ = [
    "DbState",
    "PostgresCatalog",
    "TableState",
    "compare",
    "postgres_catalog",
    "postgres_state",
    "postgres_touched",
    "postgres_written",
    "shape_changes",
    "sqlite_counters",
    "sqlite_shapes",
    "sqlite_state",
    "sqlite_virtual_shadows",
]
