"""The db kind on MariaDB through the real web flow: the credential's URL scheme picks the engine.

The refusals themselves are proven in tests/executor/kinds/test_db_kind_mariadb.py; here the
web app's own path: the workspace's credential, the change's engine, Keep and Discard, and the
credential kept out of the sandbox.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.factories import QueryFactory
from tests.servers import PASSWORD, MariaDbDatabase, MariaDbServer
from tests.webapp.workspaces.test_db_trust import HUNT_CREDENTIAL, output, run_pending
from webapp.runs import runner, services
from webapp.runs.models import RunStatus
from webapp.workspaces import db_runs as workspace_db_runs
from webapp.workspaces import services as ws
from webapp.workspaces.models import ChangeStatus, PendingChange

pytestmark = [pytest.mark.usefixtures("threads_runner", "workspaces_root"), pytest.mark.mariadb]
ADD_500 = "db.execute('UPDATE accounts SET balance = balance + 500')\n"


@pytest.fixture(scope="module")
def server(mariadb_server: MariaDbServer) -> Iterator[MariaDbDatabase]:
    with mariadb_server.database() as database:
        yield database


def query(server: MariaDbDatabase, sql: str) -> list[tuple]:
    return server.sql(sql)


@pytest.fixture
def url(server: MariaDbDatabase) -> str:
    query(server, "DROP TABLE IF EXISTS accounts")
    query(server, "CREATE TABLE accounts (name TEXT, balance INT) ENGINE=InnoDB")
    query(server, "INSERT INTO accounts VALUES ('ana', 10), ('bo', 20)")
    return server.url


def balances(server: MariaDbDatabase) -> list[tuple]:
    return query(server, "SELECT name, balance FROM accounts ORDER BY name")


def test_a_mariadb_url_runs_on_mariadb_discard_leaves_and_keep_changes(url, server):
    run, change = run_pending(ADD_500, url=url)
    assert run.status == RunStatus.SUCCEEDED, output(run)
    assert change.engine == "mariadb"
    assert ws.change_discard(change=change).status == ChangeStatus.DISCARDED
    assert balances(server) == [("ana", 10), ("bo", 20)]
    run, change = run_pending(ADD_500, url=url)
    assert ws.change_keep(change=change).status == ChangeStatus.KEPT
    assert balances(server) == [("ana", 510), ("bo", 520)]


def test_an_unknown_scheme_fails_the_run_saying_which_schemes_work():
    names = ["DATABASE_URL"]
    query = QueryFactory(kind="db", forward_code="db.execute('SELECT 1')", credential_names=names)
    secret_url = f"oracle://u:{PASSWORD}@127.0.0.1/x"
    run = services.query_run(query=query, credentials={"DATABASE_URL": secret_url})
    assert runner.wait(run.pk, 60), f"run {run.pk} did not finish"
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "postgresql://, mysql:// or mariadb://" in run.error
    assert PASSWORD not in run.error + output(run)
    assert not PendingChange.objects.filter(run=run).exists()


def credential_breaches(url: str) -> list[str]:
    run, change = run_pending(HUNT_CREDENTIAL, url=url)
    ws.change_discard(change=change)
    seen = output(run)
    return [
        where for where, text in (("plain", PASSWORD), ("reversed", PASSWORD[::-1])) if text in seen
    ]


def test_deny_the_program_never_holds_the_mariadb_credential(url):
    assert credential_breaches(url) == []


@pytest.mark.sabotage
def test_sabotage_a_mariadb_credential_left_in_the_environment_is_found(url, monkeypatch):
    options = workspace_db_runs.db_options
    monkeypatch.setattr(workspace_db_runs, "db_options", lambda *a: {**options(*a), "hide_env": ()})
    assert credential_breaches(url) != []
