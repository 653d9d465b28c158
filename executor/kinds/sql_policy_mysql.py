"""Which statements a db run may send to MariaDB or MySQL, decided on the host.

No parser but the server's own reads MySQL's grammar exactly, so the verdict stands on three
layers, each enough for what it covers:

- the text, read as raw characters before any parser: executable comments (`/*! ... */`,
  MariaDB's `/*M! ... */`) are refused, and so is `--` without a space after it (a comment to
  the parser, a double minus to the server), and the words of a file, lock or replication
  function (OUTFILE, LOAD_FILE, GET_LOCK, ...) wherever they appear, even in a string: a
  parser that misreads a quote cannot hide them;
- the statement's first keyword, from the tokens of sqlglot's MySQL dialect with the quoting
  the session pins (`ANSI_QUOTES`, `NO_BACKSLASH_ESCAPES`: strings in '...' with '' only,
  identifiers in `...` or "..."), so transaction control, SET, LOCK TABLES, LOAD DATA,
  HANDLER, user and grant management and every statement that commits implicitly are refused
  with their reason even where sqlglot has no tree for them;
- the tree sqlglot builds: the root must be a SELECT (or UNION...), INSERT, UPDATE, DELETE,
  EXPLAIN or SHOW, with no `SELECT ... INTO`, no write near the system schemas, no refused
  function anywhere in it.

The server then runs the text as one prepared statement (COM_STMT_PREPARE takes exactly one),
and the session checks sql_mode and the transaction after every statement (db_mariadb.py).
"""

from __future__ import annotations

import logging
import re

import sqlglot
from sqlglot import exp
from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import ParseError, TokenError

from executor.kinds.errors import StatementRefused

HOLD = "Undoable holds the transaction open until you choose Keep or Discard"
IMPLICIT_COMMIT = (
    "it commits implicitly (MariaDB and MySQL end the open transaction before and after it), "
    "so Undo could not take it back; this first version refuses every such statement"
)

# The quoting the session pins with sql_mode (db_mariadb.PINNED_SQL_MODE).
PINNED_MODES = ("ANSI_QUOTES", "NO_BACKSLASH_ESCAPES")


class PinnedMySQL(MySQL):
    """MySQL's dialect read as the server reads it under ANSI_QUOTES, NO_BACKSLASH_ESCAPES."""

    class Tokenizer(MySQL.Tokenizer):
        QUOTES = ["'"]
        IDENTIFIERS = ["`", '"']
        STRING_ESCAPES = ["'"]


_DIALECT = PinnedMySQL()
# sqlglot logs a warning for every statement it keeps as an opaque Command; each is refused here
# with its reason, so the warning says nothing new.
logging.getLogger("sqlglot").setLevel(logging.ERROR)
_MAX_CHARS = 1 << 20

_EXECUTABLE_COMMENT = re.compile(r"/\*M?!", re.IGNORECASE)
_BARE_DOUBLE_MINUS = re.compile(r"--(?![ \t\r\n\f\v])")
# Words refused anywhere in the text, with why.
_FILE_WORDS = ("OUTFILE", "DUMPFILE", "INFILE", "LOAD_FILE")
_LOCK_WORDS = ("GET_LOCK", "RELEASE_LOCK", "RELEASE_ALL_LOCKS", "IS_FREE_LOCK", "IS_USED_LOCK")
_WAIT_WORDS = (
    "MASTER_POS_WAIT",
    "MASTER_GTID_WAIT",
    "SOURCE_POS_WAIT",
    "WAIT_FOR_EXECUTED_GTID_SET",
)
_UDF_WORDS = ("SYS_EXEC", "SYS_EVAL", "SYS_GET", "SYS_SET")
_SEQUENCE_WORDS = ("SETVAL",)
_WORDS = re.compile(
    r"\b("
    + "|".join(_FILE_WORDS + _LOCK_WORDS + _WAIT_WORDS + _UDF_WORDS + _SEQUENCE_WORDS)
    + r")\b",
    re.IGNORECASE,
)

# What the first keyword says, for statements refused whatever follows.
_TRANSACTION = {"BEGIN", "START", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "XA"}
_GRANTS = {"GRANT", "REVOKE"}
_DDL = {
    "CREATE",
    "ALTER",
    "DROP",
    "RENAME",
    "TRUNCATE",
    "ANALYZE",
    "OPTIMIZE",
    "REPAIR",
    "CHECK",
    "CHECKSUM",
    "FLUSH",
    "CACHE",
    "INSTALL",
    "UNINSTALL",
    "RESET",
    "PURGE",
    "CHANGE",
    "BACKUP",
}
_PROCEDURAL = {"CALL", "DO", "PREPARE", "EXECUTE", "DEALLOCATE"}
_ADMIN = {"KILL", "SHUTDOWN", "BINLOG", "STOP", "USE", "HELP"}
_USER_OBJECTS = {"USER", "ROLE"}

_ROOTS = (exp.Select, exp.SetOperation, exp.Insert, exp.Update, exp.Delete, exp.Describe, exp.Show)
_SYSTEM_SCHEMAS = {"mysql", "information_schema", "performance_schema", "sys"}


def check_mysql(sql: str) -> bool:
    """Accept one allowed MariaDB/MySQL statement, or raise StatementRefused saying why.

    Returns whether the statement returns rows.
    """
    _check_text(sql)
    words = _leading_words(sql)
    _check_leading(words)
    _check_words(sql)
    tree = _parse(sql, words)
    _check_tree(tree)
    return _returns_rows(tree)


def _check_text(sql: str) -> None:
    if not isinstance(sql, str):
        raise StatementRefused("the statement must be text")
    if "\x00" in sql:
        raise StatementRefused("the statement contains a NUL character")
    if len(sql) > _MAX_CHARS:
        raise StatementRefused(f"the statement is over {_MAX_CHARS} characters")
    if _EXECUTABLE_COMMENT.search(sql):
        raise StatementRefused(
            "executable comments (/*! ... */, /*M! ... */) are not allowed: the server runs "
            "what is inside them, which Undoable's parser reads as a comment (in a string, "
            "pass the text as a parameter)"
        )
    if _BARE_DOUBLE_MINUS.search(sql):
        raise StatementRefused(
            "`--` without a space after it is not allowed: the server reads it as two minus "
            "signs, a parser as a comment; write `-- ` for a comment or `- -` (in a string, "
            "pass the text as a parameter)"
        )


def _check_words(sql: str) -> None:
    found = _WORDS.search(sql)
    if found:
        word = found.group(1).upper()
        raise StatementRefused(f"{word} is not allowed ({_word_reason(word)}); {_ANYWHERE}")


_ANYWHERE = "the word is refused anywhere in the text: pass such text as a parameter"


def _word_reason(word: str) -> str:
    if word in _FILE_WORDS:
        return "it reads or writes files on the server or the client"
    if word in _LOCK_WORDS:
        return "a named lock outlives the transaction that Undoable holds for Keep or Discard"
    if word in _WAIT_WORDS:
        return "it waits on replication"
    if word in _SEQUENCE_WORDS:
        return "a sequence's position is not restored by a rollback"
    return "it runs programs on the server"


def _leading_words(sql: str) -> list[str]:
    try:
        tokens = _DIALECT.tokenize(sql)
    except TokenError as exc:
        raise StatementRefused(f"the statement cannot be read: {exc}") from None
    if not tokens:
        raise StatementRefused("empty statement: send one SQL statement per call")
    # A token may be several words (sqlglot reads LOCK TABLES as one).
    return " ".join(token.text for token in tokens[:3]).upper().split()


def _check_leading(words: list[str]) -> None:
    first = words[0]
    second = words[1] if len(words) > 1 else ""
    if first in _TRANSACTION:
        raise StatementRefused(f"{first} (transaction control) is not allowed: {HOLD}")
    if first == "SET":
        raise StatementRefused(
            "SET is not allowed: the session's variables (sql_mode, autocommit, time limits, "
            "isolation, password, role) are fixed by Undoable for the held transaction"
        )
    if first in ("LOCK", "UNLOCK"):
        raise StatementRefused(f"{first} TABLES is not allowed: {IMPLICIT_COMMIT}")
    if first == "LOAD":
        raise StatementRefused(
            "LOAD DATA / LOAD XML / LOAD INDEX is not allowed: it reads files on the server or "
            "the client"
        )
    if first == "HANDLER":
        raise StatementRefused(
            "HANDLER is not allowed: it reads tables outside the transaction's snapshot and "
            "keeps them open past the statement"
        )
    if first in _GRANTS or (first in _DDL and second in _USER_OBJECTS):
        raise StatementRefused(
            f"{first} {second if second in _USER_OBJECTS else ''}".strip()
            + " (user and grant management) is not allowed: "
            + IMPLICIT_COMMIT
        )
    if first in _DDL:
        raise StatementRefused(f"{first} is not allowed: {IMPLICIT_COMMIT}")
    if first in _PROCEDURAL:
        raise StatementRefused(
            f"{first} is not allowed: procedural or dynamic SQL could run statements Undoable "
            f"did not check, or end the transaction ({HOLD})"
        )
    if first in _ADMIN:
        raise StatementRefused(f"{first} is not allowed: it acts on the server or the session")


def _parse(sql: str, words: list[str]) -> exp.Expression:
    try:
        statements = [s for s in sqlglot.parse(sql, dialect=_DIALECT) if s is not None]
    except (ParseError, TokenError) as exc:
        raise StatementRefused(
            f"the statement cannot be checked: Undoable's MySQL parser (sqlglot) does not read "
            f"it ({str(exc).splitlines()[0]})"
        ) from None
    if len(statements) != 1:
        if not statements:
            raise StatementRefused("empty statement: send one SQL statement per call")
        raise StatementRefused(
            f"one statement per call: this text holds {len(statements)} statements "
            "(send them one at a time)"
        )
    tree = statements[0]
    if isinstance(tree, exp.Command) or not isinstance(tree, exp.Expression):
        raise StatementRefused(
            f"{words[0]} is not allowed: Undoable's MySQL parser (sqlglot) has no tree for it "
            "to check (REPLACE: use INSERT ... ON DUPLICATE KEY UPDATE)"
        )
    return tree


def _check_tree(tree: exp.Expression) -> None:
    root = tree.this if isinstance(tree, exp.Describe) else tree
    described_table = isinstance(tree, exp.Describe) and isinstance(root, exp.Table)
    if not described_table and (not isinstance(root, _ROOTS) or isinstance(root, exp.Describe)):
        name = type(root).__name__.upper()
        raise StatementRefused(
            f"{name} is not allowed: only SELECT, INSERT, UPDATE, DELETE, EXPLAIN and SHOW run "
            f"inside the held transaction ({HOLD})"
        )
    writes = isinstance(root, exp.Insert | exp.Update | exp.Delete)
    for node in tree.walk():
        if isinstance(node, exp.Select) and node.args.get("into") is not None:
            raise StatementRefused(
                "SELECT ... INTO is not allowed: it writes files or session variables; read "
                "the rows instead"
            )
        if isinstance(node, exp.Into):
            raise StatementRefused("SELECT ... INTO is not allowed: read the rows instead")
        if writes and isinstance(node, exp.Table) and node.db.lower() in _SYSTEM_SCHEMAS:
            raise StatementRefused(
                f"a write that names {node.db}.{node.name} is not allowed: the system schemas "
                "hold users, grants and the server's own state"
            )


def _returns_rows(tree: exp.Expression) -> bool:
    if isinstance(tree, exp.Select | exp.SetOperation | exp.Describe | exp.Show):
        return True
    return tree.args.get("returning") is not None


__all__ = ["PINNED_MODES", "PinnedMySQL", "check_mysql"]
