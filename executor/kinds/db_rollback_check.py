"""A PostgreSQL rollback that proves itself: the touched tables' digests as they were before
the forward run and after the rollback.

The whole database is not read for every run; only the tables the run touched are, and they
are known only once it ran. So the session exports its snapshot before the program's first
statement (`pg_export_snapshot()`: the database as the run found it, importable while the
run's transaction is open), and at Undo the host, in the db process:

1. lists, on the run's connection, the tables its transaction wrote rows of
   (`pg_stat_xact_user_tables`: trigger and function writes included) and the tables that
   exist now;
2. on a second connection to the same address, imports the snapshot (REPEATABLE READ) and
   digests those tables, plus any table created or dropped since (the two lists differ);
3. rolls the run's transaction back and digests the same tables afresh.

The digests match when the rollback left those tables as the run found them. Anything else
that changed them meanwhile (another session's commit, a write that escaped the transaction)
is a mismatch too, as a workspace changed behind a Discard is. A table changed only in its
shape (an ALTER TABLE that writes no row) is not listed by step 1. Costs: the export holds
back vacuum's horizon while the change waits (the open transaction mostly does already), and
an Undo reads the touched tables twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from executor.kinds.db_digest import postgres_state
from executor.kinds.errors import TransactionError

_WRITTEN = """
SELECT schemaname || '.' || relname FROM pg_catalog.pg_stat_xact_user_tables
WHERE n_tup_ins + n_tup_upd + n_tup_del > 0
"""
_TABLES = """
SELECT n.nspname || '.' || c.relname FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\\_%'
"""


def _names(conn: psycopg.Connection, query: str) -> set[str]:
    return {str(row[0]) for row in conn.execute(query)}


def _end_transaction(conn: psycopg.Connection) -> None:
    conn.rollback()


def rollback_verified(
    conn: psycopg.Connection, snapshot: str, connect: Callable[[], psycopg.Connection]
) -> dict[str, Any]:
    """Roll the run's transaction on `conn` back (the steps in the module's text); {"before",
    "after", "tables"}: the touched tables' digests in `snapshot` and after the rollback.
    `connect` opens the second connection, to the address the run's went to."""
    touched = _names(conn, _WRITTEN)
    tables_now = _names(conn, _TABLES)
    with connect() as then:
        then.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        then.read_only = True
        then.execute(f"SET TRANSACTION SNAPSHOT '{_literal(snapshot)}'")
        touched |= tables_now ^ _names(then, _TABLES)
        before = postgres_state(then, only=touched).digest()
        then.rollback()
    _end_transaction(conn)
    after = postgres_state(conn, only=touched).digest()
    conn.rollback()  # the reading's own transaction
    return {"before": before, "after": after, "tables": sorted(touched)}


def _literal(snapshot: str) -> str:
    """The snapshot id the server gave (hex digits and dashes); anything else is refused
    rather than spliced into the SET's text (it takes no parameter)."""
    if not snapshot or any(c not in "0123456789ABCDEFabcdef-" for c in snapshot):
        raise TransactionError("the exported snapshot id is not one the server gives")
    return snapshot


__all__ = ["rollback_verified"]
