"""The host side of a db run: one database session whose transaction only the host ends.

    session = open_sqlite(path, max_bytes=...)      # executor/kinds/db_sqlite.py
    session = open_postgres(url, allow_private=...)  # executor/kinds/db_postgres.py
    reply = session.execute(sql, params)             # checked, run, capped; or StatementRefused
    session.commit()                                 # Keep; rollback() is Undo

Keep and Undo are the host's calls, never the program's.
"""

from executor.kinds.db_postgres import PostgresSession, open_postgres
from executor.kinds.db_sqlite import SqliteSession, open_sqlite
from executor.kinds.db_values import DbSession, JsonValue, Params, Reply, from_json, to_json

__all__ = [
    "DbSession",
    "JsonValue",
    "Params",
    "PostgresSession",
    "Reply",
    "SqliteSession",
    "from_json",
    "open_postgres",
    "open_sqlite",
    "to_json",
]
