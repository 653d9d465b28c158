"""The executor is configured once from settings and fails closed with the backend's message."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
from django.test import override_settings
from django.urls import reverse

from executor import BackendUnavailable, Executor, RunSpec
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


def in_a_forked_child(parent: Executor, *, sabotage: bool = False) -> list[object]:
    """Fork as Celery's prefork pool does; the child reports whether its Executor is its own
    and what `print(1 + 1)` printed through it. `sabotage`: the glue cannot tell the child from
    its parent (their pids read alike), and the child runs nothing on what it got."""
    parent_pid = os.getpid()
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, and leave without running pytest's teardown
        status = 1
        try:
            os.close(reading)
            if sabotage:
                executor_glue.os.getpid = lambda: parent_pid
            child = executor_get()
            own = child is not parent and child.backend is not parent.backend
            stdout = child.run(RunSpec(code="print(1 + 1)")).stdout if own else None
            os.write(writing, json.dumps([own, stdout]).encode())
            if own:
                reset_executor()
            status = 0
        finally:
            os._exit(status)
    os.close(writing)
    with os.fdopen(reading, "rb") as answer:
        reported = json.loads(answer.read() or b"null")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return reported


def test_a_forked_child_builds_its_own_and_leaves_the_parents(sandbox_backend) -> None:
    parent = executor_get()
    assert in_a_forked_child(parent) == [True, "2\n"]
    assert executor_get() is parent
    assert parent.run(RunSpec(code="print(3)")).stdout == "3\n"


@pytest.mark.sabotage
def test_sabotage_a_child_that_looks_like_its_parent_gets_the_parents(sandbox_backend) -> None:
    assert in_a_forked_child(executor_get(), sabotage=True) == [False, None]


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
