"""A PostgreSQL rollback that proves itself: the touched tables' digests as they were before
the forward run and after the rollback.

The whole database is not read for every run; only the tables the run touched are, and they
are known only once it ran. The session exports its transaction's snapshot before the
program's first statement (db_postgres: the database as the run found it, importable while the
transaction is open), and at Undo the host, in the db process:

1. reads, on the run's connection, the catalog now and the tables the transaction wrote rows
   of (db_digest: `postgres_catalog`, `postgres_written`, which takes in what triggers and
   functions wrote);
2. on a second connection to the same address, imports the snapshot and reads the catalog as
   it was; the touched tables are the rehearsal's (`postgres_touched`: written, or whose shape
   or storage file moved, or that came or went), and their rows are digested as they were;
3. rolls the run's transaction back and digests the same tables afresh.

The digests match when the rollback left the database as the run found it (every table's
shape, the touched tables' rows). Anything else that changed them meanwhile (another session's
commit, a write that escaped the transaction) is a mismatch too, as a workspace changed behind a
Discard is. Costs: the export holds back vacuum's horizon while the change waits (the open
transaction mostly does already), an Undo reads the catalog three times and the touched tables
twice, over one more connection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from executor.kinds.db_digest import (
    postgres_catalog,
    postgres_state,
    postgres_touched,
    postgres_written,
)


def _end_transaction(conn: psycopg.Connection) -> None:
    conn.rollback()


def rollback_verified(
    conn: psycopg.Connection, snapshot: str, connect: Callable[[], psycopg.Connection]
) -> dict[str, Any]:
    """Roll the run's transaction on `conn` back (the steps in the module's text); {"before",
    "after", "tables"}: the digests in `snapshot` and after the rollback, and the touched
    tables whose rows they cover. `connect` opens the second connection, to the address the
    run's went to."""
    now = postgres_catalog(conn)
    written = postgres_written(conn)
    with connect() as reader:
        reader.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        reader.read_only = True
        reader.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
        begun = postgres_catalog(reader)
        touched = postgres_touched(begun, now, written)
        before = postgres_state(reader, begun, touched & begun.shapes.keys()).digest()
        reader.rollback()
    _end_transaction(conn)
    after_catalog = postgres_catalog(conn)
    after = postgres_state(conn, after_catalog, touched & after_catalog.shapes.keys()).digest()
    conn.rollback()  # the reading's own transaction
    return {"before": before, "after": after, "tables": sorted(touched)}


__all__ = ["rollback_verified"]
