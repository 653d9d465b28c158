"""A program cannot signal its run's supervisor, PID 1 of the run's pid namespace (issue 41,
item 9). The supervisor installs no signal handler, so the kernel drops every signal the program
sends it; and a run whose supervisor ends without the program's status anyway is a failed run
that says why on its stderr, never an exception out of the backend.

The deny test runs on every backend (the `sandbox` fixture); each sabotage gives one way of
starting a run a supervisor that keeps Python's SIGINT handler.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NoReturn

import pytest
from hostile_kit import TEST_LIMITS, SandboxRunner

import executor
from executor import RunResult, RunSpec
from executor.backends.base import Backend
from executor.backends.docker import backend as docker_backend
from executor.errors import BackendUnavailable
from executor.linux import pool
from executor.policy import bwrap_args
from executor.result import SUPERVISOR_LOST
from tests.executor.backends.sabotaged_sources import sabotaged_driver
from tests.prerequisites import ROOTFS, SANDBOX_IMAGE

# Every signal there is, to PID 1 (SIGKILL and SIGSTOP included: the kernel never lets a
# namespace's own processes stop or kill its init), then what PID 1 catches (/proc/1/status is
# readable even where the supervisor is not dumpable).
SIGNAL_PID_1 = """
import os, signal
for sig in sorted(signal.valid_signals()):
    os.kill(1, sig)
print("PID 1 signalled", flush=True)
with open("/proc/1/status") as status:
    caught = next(line.split()[1] for line in status if line.startswith("SigCgt:"))
print("PID 1 catches", caught)
"""
NO_HANDLER = "0" * 16


def supervisor_problems(result: RunResult) -> list[str]:
    problems = []
    if "PID 1 signalled\n" not in result.stdout or result.exit_code != 0:
        problems.append(f"the run did not survive signalling PID 1: {result!r}")
    if f"PID 1 catches {NO_HANDLER}\n" not in result.stdout:
        problems.append(f"PID 1 has a signal handler: {result.stdout!r}")
    return problems


def test_deny_signalling_the_supervisor(sandbox: SandboxRunner) -> None:
    assert supervisor_problems(sandbox.run(SIGNAL_PID_1)) == []


# What each supervisor does to drop Python's SIGINT handler, and a line that installs it (as
# the interpreter does, unless it starts with SIGINT ignored, as under a shell's `&`).
BWRAP_DROP = "    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)\n"
BWRAP_KEEP = "    _signal.signal(_signal.SIGINT, _signal.default_int_handler)\n"
DOCKER_DROP = "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
DOCKER_KEEP = "    signal.signal(signal.SIGINT, signal.default_int_handler)\n"


def _sabotaged_bwrap(
    monkeypatch: pytest.MonkeyPatch, docker_missing: Callable[[str], NoReturn], *, zygote: bool
) -> Backend:
    if zygote:
        sabotaged_driver(monkeypatch, BWRAP_DROP, BWRAP_KEEP)
    else:
        source = bwrap_args.driver_source().replace(BWRAP_DROP, BWRAP_KEEP)
        assert BWRAP_KEEP in source
        monkeypatch.setattr(bwrap_args, "driver_source", lambda: source)
        # The payload is cached per root filesystem: this backend gets one made afresh.
        monkeypatch.setattr(pool, "driver_payload", bwrap_args.driver_payload.__wrapped__)
    return executor.create_backend(
        "bwrap", rootfs=str(ROOTFS), warm_pool_size=0, zygote=zygote, pool_limits=TEST_LIMITS
    )


def _sabotaged_docker(
    monkeypatch: pytest.MonkeyPatch, docker_missing: Callable[[str], NoReturn], *, zygote: bool
) -> Backend:
    if zygote:
        sabotaged_driver(monkeypatch, BWRAP_DROP, BWRAP_KEEP)
    else:
        assert DOCKER_DROP in docker_backend.DRIVER_SOURCE
        sabotaged = docker_backend.DRIVER_SOURCE.replace(DOCKER_DROP, DOCKER_KEEP)
        monkeypatch.setattr(docker_backend, "DRIVER_SOURCE", sabotaged)
    try:
        built = executor.create_backend(
            "docker", image=SANDBOX_IMAGE, warm_pool_size=0, limits=TEST_LIMITS, zygote=zygote
        )
    except BackendUnavailable as exc:
        docker_missing(f"the docker backend is unavailable: {exc}")
    if zygote and built.forked_runs == 0:
        built.close()
        pytest.fail("the docker backend runs no program forked from its template")
    return built


SABOTAGED = {
    "bwrap": functools.partial(_sabotaged_bwrap, zygote=True),
    "bwrap-sandbox": functools.partial(_sabotaged_bwrap, zygote=False),
    "docker": functools.partial(_sabotaged_docker, zygote=True),
    "docker-containers": functools.partial(_sabotaged_docker, zygote=False),
}


@pytest.mark.sabotage
@pytest.mark.parametrize(
    "kind",
    [
        "bwrap",
        "bwrap-sandbox",
        pytest.param("docker", marks=pytest.mark.docker),
        pytest.param("docker-containers", marks=pytest.mark.docker),
    ],
)
def test_sabotage_a_supervisor_with_a_sigint_handler_fails_and_the_run_says_why(
    kind: str, monkeypatch: pytest.MonkeyPatch, docker_missing: Callable[[str], NoReturn]
) -> None:
    built = SABOTAGED[kind](monkeypatch, docker_missing)
    try:
        result = built.run(RunSpec(code=SIGNAL_PID_1), limits=TEST_LIMITS)
    finally:
        built.close()
    assert supervisor_problems(result) != []
    # The supervisor died of the program's SIGINT: no status, a failed run with the reason.
    assert (result.exit_code, result.signal, result.ok) == (None, None, False)
    assert result.stderr.endswith(SUPERVISOR_LOST + "\n"), result.stderr
