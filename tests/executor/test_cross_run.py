"""What one run could leave or show another, on every backend (checks: cross_run.py).

Two runs each, so not deny cases of one program (test_sabotage.py); each check's sabotage is in
the zygote's tests, which take the wall it proves down.
"""

from __future__ import annotations

import cross_run
from hostile_kit import SandboxRunner


def test_no_run_finds_a_file_an_earlier_run_left(sandbox: SandboxRunner) -> None:
    cross_run.check_no_run_finds_a_file_an_earlier_run_left(sandbox.backend)


def test_no_run_sees_a_concurrent_runs_terminal(sandbox: SandboxRunner) -> None:
    cross_run.check_concurrent_runs_share_no_terminal(sandbox.backend)
