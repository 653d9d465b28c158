"""Fixtures for running real code: the embedded thread runner on the real bwrap sandbox."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings

from webapp.executor_glue import executor_get, reset_executor
from webapp.runs import runner


@pytest.fixture(scope="session")
def sandbox_backend():
    """The real sandbox, configured from settings once for the session (as in production)."""
    reset_executor()
    yield executor_get()
    runner.shutdown()


@pytest.fixture
def threads_runner(sandbox_backend, transactional_db) -> Iterator[None]:
    """Embedded mode: runs execute on the in-process pool and commit for real."""
    with override_settings(UNDOABLE_RUNNER="threads"):
        yield
    runner.shutdown()
