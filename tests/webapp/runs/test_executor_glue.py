"""The executor is configured once from settings and fails closed with the backend's message."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
from django.test import override_settings
from django.urls import reverse

from executor import BackendUnavailable, RunSpec
from tests.factories import QueryFactory
from webapp import executor_glue
from webapp.executor_glue import executor_get, executor_problem, reset_executor, server_caps
from webapp.runs import runner, services
from webapp.runs.models import RunStatus


@pytest.fixture
def broken_sandbox(sandbox_backend) -> Iterator[None]:
    with override_settings(EXECUTOR_ROOTFS="/nonexistent/rootfs", UNDOABLE_RUNNER="threads"):
        reset_executor()
        yield
    reset_executor()
    executor_get()


def test_it_configures_the_backend_once_with_the_server_caps(sandbox_backend) -> None:
    built = executor_get()
    assert executor_get() is built
    assert built.caps == server_caps()


@pytest.mark.django_db(transaction=True)
def test_a_broken_sandbox_fails_closed_and_says_why(broken_sandbox, owner, owner_client) -> None:
    query = QueryFactory(owner=owner)
    run = services.query_run(query=query)
    assert runner.wait(run.pk, 30)
    run.refresh_from_db()
    page = owner_client.get(reverse("queries:query-detail", args=[query.pk])).content.decode()
    assert run.status == RunStatus.FAILED
    assert "/nonexistent/rootfs" in run.error
    assert executor_problem() == run.error
    assert "The sandbox is unavailable" in page


def test_a_forked_child_builds_its_own_and_leaves_the_parents(sandbox_backend) -> None:
    """As Celery's prefork children do: the child's Executor is its own; the parent's still runs."""
    parent = executor_get()
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, and leave without running pytest's teardown
        status = 1
        try:
            os.close(reading)
            child = executor_get()
            result = child.run(RunSpec(code="print(1 + 1)"))
            own = child is not parent and child.backend is not parent.backend
            os.write(writing, json.dumps([own, result.stdout]).encode())
            reset_executor()
            status = 0
        finally:
            os._exit(status)
    os.close(writing)
    with os.fdopen(reading, "rb") as answer:
        reported = json.loads(answer.read() or b"null")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert reported == [True, "2\n"]
    assert executor_get() is parent
    assert parent.run(RunSpec(code="print(3)")).stdout == "3\n"


def test_a_refused_backend_is_remembered_with_its_message(broken_sandbox, monkeypatch) -> None:
    builds: list[object] = []
    build = executor_glue._build

    def counted() -> object:
        builds.append(None)
        return build()

    monkeypatch.setattr(executor_glue, "_build", counted)
    for _ in range(2):
        with pytest.raises(BackendUnavailable, match="/nonexistent/rootfs") as refused:
            executor_get()
    assert len(builds) == 1  # not a slow self-check on every request
    assert executor_problem() == str(refused.value)
