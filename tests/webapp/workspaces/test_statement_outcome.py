"""The db change list names a statement without a row count by what it did, never "-1 row(s)"
(issue 42, finding 6); counts and refusals pass through as the broker wrote them."""

from __future__ import annotations

import pytest

from webapp.workspaces.db_runs import statement_list
from webapp.workspaces.statement_outcome import statement_outcome

NO_COUNT = "-1 row(s) affected"


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("CREATE TABLE users (name TEXT)", "table created"),
        ("create unique index if not exists i on t (a)", "index created"),
        ("CREATE TEMP TABLE x AS SELECT 1", "table created"),
        ("DROP VIEW v", "view dropped"),
        ("ALTER TABLE t ADD COLUMN b int", "table altered"),
        ("TRUNCATE t", "table truncated"),
        ("VACUUM", "done"),
        ('CREATE TABLE "' + "x" * 300, "done"),  # a quote left open where the head is cut
    ],
)
def test_a_statement_without_a_row_count_says_what_it_did(sql: str, said: str) -> None:
    assert statement_outcome(sql, NO_COUNT) == said


@pytest.mark.parametrize(
    "outcome",
    ["3 row(s) affected", "0 row(s) affected", "2 row(s)", "refused: ATTACH", "failed: x"],
)
def test_counts_and_refusals_pass_through(outcome: str) -> None:
    assert statement_outcome("CREATE TABLE t (a int)", outcome) == outcome


def test_the_change_list_is_built_with_the_words() -> None:
    class Log:
        entries = [
            {"sql": "CREATE TABLE t (a int)", "outcome": NO_COUNT},
            {"sql": "INSERT INTO t VALUES (1)", "outcome": "1 row(s) affected"},
        ]

    listed = statement_list(Log())  # type: ignore[arg-type]
    assert [entry["summary"] for entry in listed] == ["table created", "1 row(s) affected"]
