"""Which statements a db run may send, decided on the host by the databases' own parsers.

PostgreSQL statements are parsed by PostgreSQL's parser (pglast, libpg_query) and the whole tree
is checked: one statement per call, an allowlist of statement types (anywhere in the tree, so
EXPLAIN, CREATE TABLE AS, WITH and CREATE SCHEMA cannot smuggle another), no call of a function
that ends or escapes the transaction or reaches outside the database, no write to the system
catalogs (their views' rules change settings: pg_settings calls set_config), and nothing a
rollback cannot undo (setval, a sequence's RESTART). SQLite statements
are checked by SQLite itself: `sqlite_authorize` is the decision an authorizer callback makes
for every action a prepared statement (and every trigger or view it fires) would take.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterator

from pglast import ast, parse_sql
from pglast.enums.parsenodes import ObjectType
from pglast.parser import ParseError, scan

from executor.kinds.errors import StatementFailed, StatementRefused

HOLD = "Undoable holds the transaction open until you choose Keep or Discard"

_ALLOWED_STATEMENTS: tuple[type, ...] = (
    ast.RawStmt,
    ast.SelectStmt,
    ast.InsertStmt,
    ast.UpdateStmt,
    ast.DeleteStmt,
    ast.MergeStmt,
    ast.CreateStmt,
    ast.CreateTableAsStmt,
    ast.AlterTableStmt,
    ast.DropStmt,
    ast.IndexStmt,
    ast.ViewStmt,
    ast.CreateSeqStmt,
    ast.AlterSeqStmt,
    ast.CompositeTypeStmt,
    ast.CreateEnumStmt,
    ast.AlterEnumStmt,
    ast.CreateDomainStmt,
    ast.CreateSchemaStmt,
    ast.CommentStmt,
    ast.TruncateStmt,
    ast.ExplainStmt,
    ast.GrantStmt,
    ast.LockStmt,
    ast.VariableShowStmt,
    ast.RefreshMatViewStmt,
    ast.RenameStmt,
    ast.VariableSetStmt,  # narrowed in _check_set
)

# What a refused statement is called in the message, when its type name is not plain enough.
_NAMES: dict[type, str] = {
    ast.CopyStmt: "COPY",
    ast.DoStmt: "DO",
    ast.CallStmt: "CALL",
    ast.ListenStmt: "LISTEN",
    ast.NotifyStmt: "NOTIFY",
    ast.UnlistenStmt: "UNLISTEN",
    ast.PrepareStmt: "PREPARE",
    ast.ExecuteStmt: "EXECUTE",
    ast.DeallocateStmt: "DEALLOCATE",
    ast.DeclareCursorStmt: "DECLARE (cursors)",
    ast.FetchStmt: "FETCH/MOVE",
    ast.ClosePortalStmt: "CLOSE",
    ast.LoadStmt: "LOAD",
    ast.VacuumStmt: "VACUUM/ANALYZE",
    ast.CheckPointStmt: "CHECKPOINT",
    ast.AlterSystemStmt: "ALTER SYSTEM",
    ast.CreatedbStmt: "CREATE DATABASE",
    ast.DropdbStmt: "DROP DATABASE",
    ast.CreateExtensionStmt: "CREATE EXTENSION",
    ast.DiscardStmt: "DISCARD",
    ast.CreateFunctionStmt: "CREATE FUNCTION/PROCEDURE",
}

_RENAMABLE = {
    ObjectType.OBJECT_TABLE,
    ObjectType.OBJECT_COLUMN,
    ObjectType.OBJECT_INDEX,
    ObjectType.OBJECT_VIEW,
    ObjectType.OBJECT_MATVIEW,
    ObjectType.OBJECT_SEQUENCE,
    ObjectType.OBJECT_TYPE,
    ObjectType.OBJECT_DOMAIN,
    ObjectType.OBJECT_ATTRIBUTE,
    ObjectType.OBJECT_SCHEMA,
    ObjectType.OBJECT_TABCONSTRAINT,
}

# Planner knobs a program may change for the rest of the transaction (SET LOCAL only).
_SETTABLE = {"work_mem", "random_page_cost", "seq_page_cost", "jit"}

# pg_* functions are refused unless listed here: harmless reads and transaction-scoped locks.
_PG_FUNCTIONS = {
    "pg_typeof",
    "pg_sleep",
    "pg_sleep_for",
    "pg_sleep_until",
    "pg_backend_pid",
    "pg_current_xact_id",
    "pg_current_xact_id_if_assigned",
    "pg_xact_status",
    "pg_column_size",
    "pg_relation_size",
    "pg_table_size",
    "pg_indexes_size",
    "pg_total_relation_size",
    "pg_size_pretty",
    "pg_size_bytes",
    "pg_advisory_xact_lock",
    "pg_advisory_xact_lock_shared",
    "pg_try_advisory_xact_lock",
    "pg_try_advisory_xact_lock_shared",
    "pg_get_serial_sequence",
    "pg_get_viewdef",
    "pg_get_indexdef",
    "pg_get_constraintdef",
    "pg_get_expr",
    "pg_get_keywords",
    "pg_table_is_visible",
    "pg_type_is_visible",
    "pg_client_encoding",
    "pg_encoding_to_char",
    "pg_input_is_valid",
    "pg_input_error_info",
    "pg_is_in_recovery",
}
# Outside pg_*: functions that change settings, run a query given as text (unchecked by us),
# or reach files, other servers or other sessions.
_REFUSED_FUNCTIONS = {
    "set_config",
    "query_to_xml",
    "query_to_xmlschema",
    "query_to_xml_and_xmlschema",
    "cursor_to_xml",
    "cursor_to_xmlschema",
    "ts_stat",
    "ts_rewrite",
}
_REFUSED_PREFIXES = ("dblink", "lo_", "http", "postgres_fdw", "binary_upgrade_")
# Changes a rollback does not undo (nextval's consumed values are documented instead: they only
# leave gaps). setval is not transactional; a RESTART is, but once kept it rewinds values other
# sessions already took.
_NOT_UNDOABLE_FUNCTIONS = {"setval"}
_NOT_UNDOABLE = (
    "a sequence's position is shared with every other session: a rollback does not restore "
    "it, and once kept a rewind hands out values others already took"
)

# Schemas of the system catalogs: writing them is never a run's business, and their views' rules
# reach the server's own state (UPDATE pg_settings calls set_config).
_CATALOG_SCHEMAS = {"pg_catalog", "information_schema", "pg_toast"}

# Statements longer than this parse on a thread with a stack deep enough for the worst nesting
# their tokens allow; below it, any tree fits a default thread stack.
_INLINE_CHARS = 4096
_MAX_OPERATORS = 20_000
_PARSE_STACK_BYTES = 64 << 20
_LEAF_TOKENS = {
    "ICONST",
    "FCONST",
    "SCONST",
    "USCONST",
    "BCONST",
    "XCONST",
    "IDENT",
    "UIDENT",
    "PARAM",
    "NULL_P",
    "TRUE_P",
    "FALSE_P",
    "DEFAULT",
    "SQL_COMMENT",
    "C_COMMENT",
    "ASCII_40",  # (
    "ASCII_41",  # )
    "ASCII_44",  # ,
    "ASCII_46",  # .
    "ASCII_59",  # ;
}


def check_postgres(sql: str) -> bool:
    """Accept one allowed PostgreSQL statement, or raise StatementRefused / StatementFailed.

    StatementFailed is a syntax error (what the server would answer); StatementRefused names
    what is not allowed and why. Returns whether the statement returns rows.
    """
    statements = _parse(sql)
    if len(statements) != 1:
        if not statements:
            raise StatementRefused("empty statement: send one SQL statement per call")
        raise StatementRefused(
            f"one statement per call: this text holds {len(statements)} statements "
            "(send them one at a time)"
        )
    for node in _walk(statements[0]):
        if isinstance(node, ast.FuncCall):
            _check_function(node)
        elif type(node).__name__.endswith("Stmt"):
            _check_statement(node)
    root = statements[0]
    return isinstance(root, ast.RawStmt) and _returns_rows(root.stmt)


def _returns_rows(node: ast.Node | None) -> bool:
    if isinstance(node, ast.SelectStmt):
        return node.intoClause is None
    if isinstance(node, ast.ExplainStmt | ast.VariableShowStmt):
        return True
    if isinstance(node, ast.InsertStmt | ast.UpdateStmt | ast.DeleteStmt | ast.MergeStmt):
        return bool(getattr(node, "returningClause", None) or getattr(node, "returningList", None))
    return False


def _parse(sql: str) -> tuple[ast.Node, ...]:
    if "\x00" in sql:
        raise StatementRefused("the statement contains a NUL character")
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError:
        raise StatementRefused("the statement is not valid UTF-8 text") from None
    try:
        if len(sql) <= _INLINE_CHARS:
            return parse_sql(sql)
        return _parse_deep(sql)
    except ParseError as exc:
        if "memory exhausted" in str(exc):
            raise StatementRefused("statement nested too deeply to check") from None
        raise StatementFailed(f"syntax error: {exc}") from None


def _parse_deep(sql: str) -> tuple[ast.Node, ...]:
    # pglast builds its tree recursively in C: a left-deep chain (1+1+1+...) of a few hundred
    # thousand operators overflows the stack and kills the process. Bound the chain by the
    # operator tokens the lexer sees (PostgreSQL's own grammar caps the other nesting), then
    # build the tree on a thread whose stack holds that bound.
    operators = sum(1 for token in scan(sql) if token.name not in _LEAF_TOKENS)
    if operators > _MAX_OPERATORS:
        raise StatementRefused(
            f"statement too complex to check ({operators} operators and keywords, at most "
            f"{_MAX_OPERATORS}): split it, or use executemany for many rows"
        )
    result: list[tuple[ast.Node, ...]] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            result.append(parse_sql(sql))
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    with _STACK_LOCK:
        previous = threading.stack_size(_PARSE_STACK_BYTES)
        try:
            worker = threading.Thread(target=work, name="sql-policy-parse", daemon=True)
            worker.start()
        finally:
            threading.stack_size(previous)
    worker.join()
    if failure:
        raise failure[0]
    return result[0]


_STACK_LOCK = threading.Lock()


def _walk(root: ast.Node) -> Iterator[ast.Node]:
    """Every node of the tree, iteratively (trees can be far deeper than Python's recursion)."""
    stack: list[object] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, ast.Node):
            yield item
            fields = getattr(type(item), "__slots__", ())
            stack.extend(getattr(item, name, None) for name in fields)
        elif isinstance(item, list | tuple):
            stack.extend(item)


def _check_statement(node: ast.Node) -> None:
    kind = type(node)
    if isinstance(node, ast.TransactionStmt):
        name = node.kind.name.removeprefix("TRANS_STMT_").replace("_", " ") if node.kind else ""
        raise StatementRefused(f"{name or 'transaction control'} is not allowed: {HOLD}")
    if kind not in _ALLOWED_STATEMENTS:
        name = _NAMES.get(kind, _statement_name(kind))
        raise StatementRefused(f"{name} is not allowed: {_why(kind)}")
    if isinstance(node, ast.VariableSetStmt):
        _check_set(node)
    for target in _written(node):
        _check_target(target)
    if _rewinds(node):
        raise StatementRefused(f"RESTART of a sequence or identity is not allowed: {_NOT_UNDOABLE}")
    if isinstance(node, ast.RenameStmt) and node.renameType not in _RENAMABLE:
        raise StatementRefused(
            "ALTER ... RENAME is allowed for tables, columns, indexes, views, sequences, "
            "types and schemas only"
        )


def _rewinds(node: ast.Node) -> bool:
    """ALTER SEQUENCE ... RESTART, or ALTER TABLE ... ALTER COLUMN ... RESTART (identity)."""
    return isinstance(node, ast.AlterSeqStmt | ast.AlterTableStmt) and any(
        isinstance(item, ast.DefElem) and item.defname == "restart" for item in _walk(node)
    )


def _written(node: ast.Node) -> tuple[ast.RangeVar, ...]:
    """The relations a statement writes rows of or changes."""
    if isinstance(node, ast.TruncateStmt | ast.LockStmt):
        return tuple(node.relations or ())
    one = (ast.InsertStmt, ast.UpdateStmt, ast.DeleteStmt, ast.MergeStmt, ast.AlterTableStmt)
    if isinstance(node, one) and node.relation is not None:
        return (node.relation,)
    return ()


def _check_target(target: ast.RangeVar) -> None:
    schema, name = target.schemaname, target.relname or ""
    # Unqualified, a pg_* name is looked up in pg_catalog first.
    if schema in _CATALOG_SCHEMAS or (schema is None and name.startswith("pg_")):
        shown = f"{schema}.{name}" if schema else name
        raise StatementRefused(
            f"writing {shown} is not allowed: it is a system catalog (write a table of your "
            "own named pg_* with its schema, e.g. public.pg_x)"
        )


def _check_set(node: ast.VariableSetStmt) -> None:
    name = (node.name or "").lower()
    if node.is_local and (name in _SETTABLE or name.startswith("enable_")):
        return
    what = "RESET" if node.kind and node.kind.name.startswith("VAR_RESET") else "SET"
    shown = {"session_authorization": "SESSION AUTHORIZATION", "": "ALL"}.get(name, name.upper())
    raise StatementRefused(
        f"{what} {shown} is not allowed: the run's session settings (role, timeouts, quoting) "
        f"are fixed by Undoable; only SET LOCAL of {', '.join(sorted(_SETTABLE))} or enable_* "
        "planner settings is allowed"
    )


def _check_function(node: ast.FuncCall) -> None:
    parts = [getattr(part, "sval", "") or "" for part in node.funcname or ()]
    name = parts[-1].lower() if parts else ""
    shown = ".".join(parts)
    if name in _NOT_UNDOABLE_FUNCTIONS:
        raise StatementRefused(f"function {shown}() is not allowed: {_NOT_UNDOABLE}")
    refused = (
        name in _REFUSED_FUNCTIONS
        or name.startswith(_REFUSED_PREFIXES)
        or (name.startswith("pg_") and name not in _PG_FUNCTIONS)
    )
    if refused:
        raise StatementRefused(
            f"function {shown}() is not allowed: it could change the session, run unchecked "
            f"SQL, or reach outside the transaction ({HOLD})"
        )


def _statement_name(kind: type) -> str:
    """CreateTrigStmt -> CREATE TRIG."""
    words = re.findall(r"[A-Z][a-z]*", kind.__name__.removesuffix("Stmt"))
    return " ".join(words).upper() or kind.__name__


def _why(kind: type) -> str:
    if kind in (ast.CopyStmt, ast.LoadStmt):
        return "it reads or writes files or programs outside the database"
    if kind in (ast.ListenStmt, ast.NotifyStmt, ast.UnlistenStmt):
        return "it talks to other sessions"
    if kind in (ast.DoStmt, ast.CallStmt, ast.CreateFunctionStmt):
        return f"procedural code could end or escape the transaction ({HOLD})"
    return f"only data and schema statements run inside the held transaction ({HOLD})"


# SQLite: the authorizer's decision -----------------------------------------------------------

_SQLITE_READ_PRAGMAS = {
    "table_info",
    "table_xinfo",
    "table_list",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
    "foreign_key_check",
    "integrity_check",
    "quick_check",
    "collation_list",
    "function_list",
    "module_list",
    "pragma_list",
    "compile_options",
}
# Readable, never written: a value would change the file's durability or identity.
_SQLITE_VALUE_PRAGMAS = {
    "user_version",
    "schema_version",
    "application_id",
    "page_size",
    "page_count",
    "freelist_count",
    "encoding",
    "foreign_keys",
    "data_version",
}
_SQLITE_FUNCTIONS_REFUSED = {
    "load_extension",
    "fts3_tokenizer",
    "readfile",
    "writefile",
    "edit",
    "fts5_source_id",
}
_SQLITE_MODULES = {"fts3", "fts4", "fts5", "rtree", "rtree_i32", "geopoly"}


def sqlite_authorize(action: int, arg1: str | None, arg2: str | None) -> str | None:
    """Why SQLite must refuse this action of a statement being prepared, or None to allow."""
    if action == sqlite3.SQLITE_TRANSACTION:
        return f"transaction control is not allowed: {HOLD}"
    if action == sqlite3.SQLITE_SAVEPOINT:
        return f"SAVEPOINT/RELEASE is not allowed: {HOLD}"
    if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
        return "ATTACH/DETACH is not allowed: the run works on its own database file only"
    if action == sqlite3.SQLITE_PRAGMA:
        name = (arg1 or "").lower()
        if name in _SQLITE_READ_PRAGMAS or (name in _SQLITE_VALUE_PRAGMAS and arg2 is None):
            return None
        return (
            f"PRAGMA {name} is not allowed here: only read-only schema pragmas "
            "(table_info, index_list, foreign_key_list, user_version, ...) may run"
        )
    if action == sqlite3.SQLITE_FUNCTION:
        if (arg2 or "").lower() in _SQLITE_FUNCTIONS_REFUSED:
            return f"function {arg2}() is not allowed: it reaches outside the database"
        return None
    if action in (sqlite3.SQLITE_CREATE_VTABLE, sqlite3.SQLITE_DROP_VTABLE):
        if (arg2 or "").lower() in _SQLITE_MODULES:
            return None
        return f"virtual tables of module {arg2} are not allowed"
    return None
