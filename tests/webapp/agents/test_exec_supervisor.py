"""POST /api/v1/exec when the program goes for its supervisor (issue 41, item 9): signals sent to
PID 1 are dropped, and a run whose supervisor died anyway is a failed run that says why, not a
500.

The sabotages give the server's backend a supervisor that keeps Python's SIGINT handler (built
afresh for the test, as a server starts one), then also take the second protection away.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from executor.errors import SandboxFailed
from executor.linux import execute, pool
from executor.policy import bwrap_args
from executor.result import SUPERVISOR_LOST
from tests.executor.backends.sabotaged_sources import sabotaged_driver
from webapp.executor_glue import reset_executor

pytestmark = pytest.mark.django_db

EXEC = "/api/v1/exec"
SIGNAL_PID_1 = """
import os, signal
for sig in sorted(signal.valid_signals()):
    os.kill(1, sig)
print("PID 1 signalled")
"""
DROP = "    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)\n"
# Python's handler, installed (the interpreter leaves it out when started with SIGINT ignored).
KEEP = "    _signal.signal(_signal.SIGINT, _signal.default_int_handler)\n"


@pytest.fixture
def fresh_backend() -> Iterator[None]:
    """The server builds its backend again on the next request, and after the test."""
    reset_executor()
    yield
    reset_executor()


@pytest.fixture
def supervisor_with_sigint_handler(monkeypatch: pytest.MonkeyPatch, fresh_backend: None) -> None:
    sabotaged_driver(monkeypatch, DROP, KEEP)  # runs forked from the zygote's template
    source = bwrap_args.driver_source().replace(DROP, KEEP)  # and single-use sandboxes
    monkeypatch.setattr(bwrap_args, "driver_source", lambda: source)
    monkeypatch.setattr(pool, "driver_payload", bwrap_args.driver_payload.__wrapped__)


def test_a_program_that_signals_its_supervisor_gets_its_whole_result(owner, fresh_backend):
    response = owner.post(EXEC, {"code": SIGNAL_PID_1}, accept="application/json")
    assert response.status_code == 200
    body = response.json()
    assert (body["stdout"], body["exit_code"]) == ("PID 1 signalled\n", 0), body


def check_a_lost_supervisor_is_a_failed_run_with_its_reason(owner) -> None:
    response = owner.post(EXEC, {"code": SIGNAL_PID_1})
    assert response.status_code == 200
    assert response.content.decode().endswith(SUPERVISOR_LOST + "\n")
    assert response["X-Exit-Code"] == ""
    body = owner.post(EXEC, {"code": SIGNAL_PID_1}, accept="application/json").json()
    assert (body["exit_code"], body["signal"]) == (None, None)
    assert body["stderr"].endswith(SUPERVISOR_LOST + "\n")


@pytest.mark.sabotage
def test_sabotage_a_supervisor_with_a_sigint_handler_loses_the_run_and_says_so(
    owner, supervisor_with_sigint_handler
):
    body = owner.post(EXEC, {"code": SIGNAL_PID_1}, accept="application/json").json()
    assert (body["stdout"], body["exit_code"]) != ("PID 1 signalled\n", 0)  # the deny test's
    check_a_lost_supervisor_is_a_failed_run_with_its_reason(owner)


@pytest.mark.sabotage
def test_sabotage_a_lost_supervisor_raised_out_of_the_backend_is_caught(
    owner, supervisor_with_sigint_handler, monkeypatch
):
    def raise_as_before(pump, outcome):
        raise SandboxFailed("sandbox exited without a program status")

    monkeypatch.setattr(execute, "_supervisor_lost", raise_as_before)
    with pytest.raises(AssertionError, match="assert 500 == 200"):
        check_a_lost_supervisor_is_a_failed_run_with_its_reason(owner)
