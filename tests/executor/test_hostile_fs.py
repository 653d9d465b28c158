"""Hostile programs after the host's files and devices.

The programs and their checks live in deny_fs.py (shared with test_sabotage.py).
"""

from __future__ import annotations

import deny_fs as cases
from hostile_kit import SandboxRunner


def test_deny_reading_etc_shadow(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.SHADOW)


def test_deny_reading_a_canary_file_in_the_project_checkout(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.CANARY_REPO)


def test_deny_reading_a_canary_file_in_the_hosts_tmp(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.CANARY_TMP)


def test_deny_seeing_the_checkout_work_root_and_docker_socket(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.HOST_PATHS)


def test_deny_writing_outside_the_workdir(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.WRITE_OUTSIDE)


def test_deny_opening_raw_devices(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.RAW_DEVICES)
