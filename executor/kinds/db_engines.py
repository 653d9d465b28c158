"""The host side of a db run: one database session whose transaction only the host ends.

    session = open_sqlite(path, max_bytes=...)      # executor/kinds/db_sqlite.py
    session = open_postgres(url, allow_private=...)  # executor/kinds/db_postgres.py
    session = open_mariadb(url, allow_private=...)   # executor/kinds/db_mariadb.py
    engine_for_url(url)                              # which of the two a URL's scheme names
    reply = session.execute(sql, params)             # checked, run, capped; or StatementRefused
    session.commit()                                 # Keep; rollback() is Undo

Keep and Undo are the host's calls, never the program's.
"""

from executor.kinds.db_mariadb import MariaDbSession, open_mariadb
from executor.kinds.db_postgres import PostgresSession, open_postgres
from executor.kinds.db_sqlite import SqliteSession, open_sqlite
from executor.kinds.db_values import DbSession, JsonValue, Params, Reply, from_json, to_json
from executor.kinds.errors import StatementRefused

_ENGINES = {
    "postgresql": "postgres",
    "postgres": "postgres",
    "mysql": "mariadb",
    "mariadb": "mariadb",
}


def engine_for_url(url: str) -> str:
    """ "postgres" or "mariadb", by the URL's scheme; StatementRefused for any other.

    A text without a scheme is a libpq connection string (host=... dbname=...), as before
    MariaDB: PostgreSQL's. The message never repeats the URL (it holds the password).
    """
    scheme, found, _ = url.strip().partition("://")
    if not found:
        return "postgres"
    engine = _ENGINES.get(scheme.lower())
    if engine is None:
        raise StatementRefused(
            "the database URL's scheme must be postgresql://, mysql:// or mariadb://"
        )
    return engine


__all__ = [
    "DbSession",
    "JsonValue",
    "MariaDbSession",
    "Params",
    "PostgresSession",
    "Reply",
    "SqliteSession",
    "engine_for_url",
    "from_json",
    "open_mariadb",
    "open_postgres",
    "open_sqlite",
    "to_json",
]
