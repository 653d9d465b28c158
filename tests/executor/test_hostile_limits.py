"""Hostile programs that exhaust resources or try to outlive their run.

The programs and their checks live in deny_limits.py (shared with test_sabotage.py).
"""

from __future__ import annotations

import deny_limits as cases
from hostile_kit import SandboxRunner


def test_deny_fork_bomb(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.FORK_BOMB)


def test_deny_memory_bomb(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.MEMORY_BOMB)


def test_deny_cpu_loop(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.CPU_LOOP)


def test_deny_sigterm_ignoring_spinner(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.SIGTERM_SPINNER)


def test_deny_sleep_forever(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.SLEEP_FOREVER)


def test_deny_stdout_flood_with_newlines(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.FLOOD_LINES)


def test_deny_stdout_flood_without_newlines(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.FLOOD_NO_NEWLINES)


def test_deny_ten_thousand_threads(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.TEN_THOUSAND_THREADS)


def test_deny_ten_thousand_open_files(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.TEN_THOUSAND_FILES)


def test_deny_disk_fill(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.DISK_FILL)


def test_deny_double_fork_daemon(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.DOUBLE_FORK_DAEMON)
