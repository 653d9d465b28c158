"""Sandboxes run as EXECUTOR_SANDBOX_UID on the host (runs and agent sessions), never as an
account's uid such as nobody."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings

from executor import BackendUnavailable, CancelToken, RunResult, RunSpec
from tests.webapp.runs.waiting import wait_until
from webapp.executor_glue import executor_get, reset_executor, session_config

# Not the default either, so the test sees the setting arrive, not a constant.
UID = 65601


@pytest.fixture
def configured_uid(sandbox_backend, settings) -> Iterator[int]:
    settings.EXECUTOR_SANDBOX_UID = UID
    reset_executor()
    yield UID
    reset_executor()


@pytest.fixture(autouse=True)
def default_backend_after() -> Iterator[None]:
    yield
    reset_executor()
    executor_get()  # the session's sandbox_backend again, for the tests that follow


def host_processes_of(uid: int) -> list[int]:
    pids = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            lines = status.read_text().splitlines()
        except OSError:
            continue  # ended meanwhile
        uids = next(line for line in lines if line.startswith("Uid:")).split()[1:]
        if uids == [str(uid)] * 4:
            pids.append(int(status.parent.name))
    return pids


def test_a_run_sandbox_runs_as_the_configured_uid(configured_uid):
    executor = executor_get()
    cancel = CancelToken()
    results: list[RunResult] = []
    runner = threading.Thread(
        target=lambda: results.append(
            executor.run(RunSpec(code="import time\ntime.sleep(60)\n"), cancel=cancel)
        )
    )
    runner.start()
    try:
        wait_until(lambda: bool(host_processes_of(configured_uid)), timeout=30, what="sandbox")
    finally:
        cancel.cancel()
        runner.join(30)
    assert results and results[0].exit_code != 0


def test_a_session_writes_its_files_as_the_configured_uid(configured_uid):
    manager = executor_get().session_manager(session_config())
    try:
        session = manager.create()
        result = session.exec("open('mine.txt', 'w').write('x')\n")
        owner = Path(session.workdir, "mine.txt").stat().st_uid
    finally:
        manager.shutdown()
    assert result.exit_code == 0
    assert owner == configured_uid


def test_a_uid_an_account_owns_is_refused(sandbox_backend):
    with override_settings(EXECUTOR_SANDBOX_UID=65534):
        reset_executor()
        with pytest.raises(BackendUnavailable, match="nobody"):
            executor_get()
