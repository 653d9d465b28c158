"""The executor is configured once from settings and fails closed with the backend's message."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings
from django.urls import reverse

import executor
from tests.factories import QueryFactory
from webapp.executor_glue import ensure_executor, executor_problem, reset_executor, server_caps
from webapp.runs import runner, services
from webapp.runs.models import RunStatus


@pytest.fixture
def broken_sandbox(sandbox_backend) -> Iterator[None]:
    with override_settings(EXECUTOR_ROOTFS="/nonexistent/rootfs", UNDOABLE_RUNNER="threads"):
        reset_executor()
        yield
    reset_executor()
    ensure_executor()


def test_it_configures_the_backend_once_with_the_server_caps(sandbox_backend) -> None:
    backend = ensure_executor()
    assert ensure_executor() is backend is executor.get_backend()
    assert executor.caps() == server_caps()


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
