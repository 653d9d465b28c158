"""SABOTAGE PROOF: the hostile suite's deny checks, run with the sandbox switched off, must fail.

Every deny case (tests/executor/deny_*.py) runs here on UnsandboxedBackend (plain subprocess on
the host, see unsandboxed.py) with the same bait and the same check function the hostile suite
uses. Each check must report at least one violation; a check that stays silent here would pass
on a real backend no matter what the sandbox did, i.e. it would prove nothing.
"""

from __future__ import annotations

import inspect

import pytest
import test_hostile_fs
import test_hostile_limits
import test_hostile_net
import test_hostile_proc
from deny_cases import ALL_DENY_CASES
from hostile_bait import laid_bait
from hostile_kit import INCONCLUSIVE, DenyCase, kill_marked, run_case
from unsandboxed import SABOTAGE_UID, UnsandboxedBackend

pytestmark = pytest.mark.sabotage

HOSTILE_MODULES = (test_hostile_limits, test_hostile_proc, test_hostile_fs, test_hostile_net)


def _unsafe_backend(case: DenyCase) -> UnsandboxedBackend:
    uid = 0 if case.sabotage_as_root else SABOTAGE_UID
    return UnsandboxedBackend(uid=uid, pid_namespace=case.sabotage_pid_namespace)


@pytest.mark.parametrize("case", ALL_DENY_CASES, ids=lambda case: case.name)
def test_sabotage_an_unsandboxed_run_trips_the_deny_check(case: DenyCase) -> None:
    backend = _unsafe_backend(case)
    with laid_bait(backend.uid) as bait:
        try:
            result, violations = run_case(backend, case, bait)
        finally:
            kill_marked(bait.marker)  # whatever the unsafe run left alive (daemons, bombs)
    # "The probe did not run" would fail a hostile test too, but it proves nothing here.
    caught = [v for v in violations if not v.startswith(INCONCLUSIVE)]
    assert caught != [], (
        f"the deny check {case.name!r} caught no breach in an UNSANDBOXED run, so it would "
        f"pass vacuously; violations={violations} stdout={result.stdout[-500:]!r} "
        f"stderr={result.stderr[-500:]!r}"
    )


def test_sabotage_covers_every_deny_test_and_nothing_else() -> None:
    deny_tests = {
        name.removeprefix("test_deny_")
        for module in HOSTILE_MODULES
        for name, _ in inspect.getmembers(module, inspect.isfunction)
        if name.startswith("test_deny_")
    }
    assert deny_tests == {case.name for case in ALL_DENY_CASES}
    assert len(ALL_DENY_CASES) >= 35
