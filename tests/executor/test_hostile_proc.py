"""Hostile programs after the host's environment, processes and privileges.

The programs and their checks live in deny_proc.py (shared with test_sabotage.py).
"""

from __future__ import annotations

import deny_proc as cases
from hostile_kit import SandboxRunner


def test_deny_reading_a_canary_env_var_via_os_environ(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.ENV_OS_ENVIRON)


def test_deny_reading_a_canary_env_var_via_proc_self_environ(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.ENV_PROC_SELF)


def test_deny_reading_a_canary_env_var_via_proc_1_environ(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.ENV_PROC_1)


def test_deny_reading_a_canary_env_var_via_the_parents_environ(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.ENV_PARENT)


def test_deny_listing_host_processes(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.HOST_PROCESSES)


def test_deny_gaining_privileges_through_a_setuid_binary(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.SETUID)


def test_deny_running_as_root_or_with_capabilities(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.PRIVILEGES)


def test_deny_ptrace(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.PTRACE)


def test_deny_mount(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.MOUNT)


def test_deny_keyring(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.KEYRING)


def test_deny_bpf_userfaultfd_perf_setns_and_unshare(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.DANGEROUS_SYSCALLS)


def test_deny_kill_9_minus_1(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.KILL_EVERYTHING)


def test_deny_signalling_the_parent_and_the_host(sandbox: SandboxRunner) -> None:
    sandbox.assert_denied(cases.SIGNAL_PARENT)


def test_deny_reaching_the_host_through_proc_self_root_and_proc_1_root(
    sandbox: SandboxRunner,
) -> None:
    sandbox.assert_denied(cases.PROC_ROOTS)
