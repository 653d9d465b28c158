"""The Executor object: a backend with the caps every run narrows, built and closed by its owner."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import executor
from executor import BackendUnavailable, Executor, Limits, RunSpec

HOST_UID = 65602  # not the default, so the test sees it arrive
CAPS = Limits(wall_time_s=20, max_output_bytes=4096)


@pytest.fixture(scope="module")
def built(sandbox_rootfs: Path) -> Iterator[Executor]:
    made = Executor.start(backend="bwrap", caps=CAPS, rootfs=str(sandbox_rootfs), host_uid=HOST_UID)
    yield made
    made.close()


def test_a_run_without_limits_gets_the_caps(built: Executor) -> None:
    result = built.run(RunSpec(code="print('x' * 10000)"))
    assert result.truncated
    assert len(result.stdout.encode()) <= CAPS.max_output_bytes


def test_a_run_narrows_the_caps(built: Executor) -> None:
    result = built.run(RunSpec(code="print(1 + 1)"), limits=built.caps.narrowed(wall_time_s=5))
    assert (result.exit_code, result.stdout) == (0, "2\n")


def test_its_sandbox_host_uid_is_the_backends(built: Executor) -> None:
    assert built.sandbox_host_uid == HOST_UID


def test_a_backend_that_cannot_run_fails_closed_with_its_message(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here"
    with pytest.raises(BackendUnavailable, match=str(missing)):
        Executor.start(backend="bwrap", rootfs=str(missing))


def test_an_unknown_backend_is_refused_by_name() -> None:
    with pytest.raises(BackendUnavailable, match="'lxc'"):
        Executor.start(backend="lxc")


def test_the_package_keeps_no_executor_of_its_own() -> None:
    """No process-global backend: whoever builds an Executor owns it."""
    assert not hasattr(executor, "run")
    assert not hasattr(executor, "configure")
    assert len(executor.__all__) <= 16
