"""What the hostile suite and the sabotage proof share: deny cases, and how one is judged.

A deny case is data: a hostile program plus a predicate over what came out of running it (the
RunResult, and what the host saw: its canary files, listeners, sentinel process, signals).
The predicate returns the violations it found; an empty list means the sandbox held.
test_hostile_*.py asserts that list is empty on every real backend; test_sabotage.py asserts
it is NOT empty on the unsandboxed backend, so no deny test can pass vacuously.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hostile_bait import Bait, laid_bait

from executor.backends.base import Backend
from executor.cancel import CancelToken
from executor.limits import Limits
from executor.result import OutputCallback, RunResult
from executor.spec import RunSpec

# Small limits keep the suite fast; each case may lower or raise a few of them.
TEST_LIMITS = Limits(
    wall_time_s=3,
    cpu_time_s=3,
    memory_mib=128,
    max_pids=32,
    max_output_bytes=64 * 1024,
    max_file_size_mib=4,
    workdir_quota_mib=8,
    tmp_quota_mib=8,
    max_open_files=64,
)
MARKER_VAR = "UNDOABLE_TEST_MARKER"
INCONCLUSIVE = "inconclusive: "

Check = Callable[[RunResult, Bait, Limits], list[str]]


@dataclass(frozen=True)
class DenyCase:
    """A hostile program and the predicate that says whether the sandbox held."""

    name: str  # the hostile test is test_deny_<name>
    program: str
    check: Check
    language: str = "python"
    limits: dict[str, Any] = field(default_factory=dict)
    # How the sabotage run shows the breach: some breaches only exist for root on the host,
    # or need the pid namespace in which a leaked environment is pid 1's (see unsandboxed.py).
    sabotage_as_root: bool = False
    sabotage_pid_namespace: bool = False

    @property
    def run_limits(self) -> Limits:
        return dataclasses.replace(TEST_LIMITS, **self.limits)


def run_case(backend: Backend, case: DenyCase, bait: Bait) -> tuple[RunResult, list[str]]:
    """Run the case's program with the bait laid; return the result and its violations."""
    spec = RunSpec(
        code=case.program,
        language=case.language,
        env={MARKER_VAR: bait.marker, **bait.program_env()},
    )
    limits = case.run_limits
    result = backend.run(spec, limits=limits)
    # Checks look at the host (e.g. no daemon survives): judge it once teardown is done.
    wait_idle = getattr(backend, "wait_idle", None)
    assert wait_idle is None or wait_idle(30.0), "the run's sandbox was not torn down in 30 s"
    return result, case.check(result, bait, limits)


def report(result: RunResult) -> dict[str, Any] | None:
    """The JSON object a probe prints as its last line, or None if it never got there."""
    for line in reversed(result.stdout.splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        return value if isinstance(value, dict) else None
    return None


def inconclusive(why: str) -> str:
    """A violation that only says the probe proved nothing (it did not run, or saw nothing).

    It fails a hostile test like any violation, but it does not count as catching a breach
    in the sabotage proof.
    """
    return INCONCLUSIVE + why


def no_report(result: RunResult) -> list[str]:
    """The violation for a probe that did not report: we cannot tell it was denied anything."""
    return [
        INCONCLUSIVE + "the probe printed no report, so nothing shows it met the sandbox's walls "
        f"(exit={result.exit_code} signal={result.signal} stderr={result.stderr[-400:]!r})"
    ]


def marked_processes(marker: str) -> list[int]:
    """Host pids whose command line or environment carries `marker` (we run as root)."""
    needle = marker.encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        for part in ("cmdline", "environ"):
            try:
                data = Path(entry.path, part).read_bytes()
            except OSError:
                continue
            if needle in data:
                found.append(int(entry.name))
                break
    return found


def kill_marked(marker: str) -> list[int]:
    """SIGKILL the processes a sabotage run left behind (found by their marker)."""
    pids = marked_processes(marker)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    return pids


class SandboxRunner:
    """What a hostile test holds: runs on one backend, tagged so leftovers can be found."""

    def __init__(self, backend: Backend, *, test_name: str, program_uid: int) -> None:
        self.backend = backend
        self.test_name = test_name
        self.program_uid = program_uid
        self.markers = [secrets.token_hex(8)]

    def run(
        self,
        code: str,
        *,
        limits: Limits = TEST_LIMITS,
        on_output: OutputCallback | None = None,
        cancel: CancelToken | None = None,
        **spec_fields: Any,
    ) -> RunResult:
        env = {MARKER_VAR: self.markers[0], **spec_fields.pop("env", {})}
        spec = RunSpec(code=code, env=env, **spec_fields)
        return self.backend.run(spec, limits=limits, on_output=on_output, cancel=cancel)

    def assert_denied(self, case: DenyCase) -> None:
        """Run a deny case with the bait laid; fail with every violation found."""
        assert self.test_name == f"test_deny_{case.name}", "each deny test runs its own case"
        with laid_bait(self.program_uid) as bait:
            self.markers.append(bait.marker)
            result, violations = run_case(self.backend, case, bait)
        assert violations == [], _describe(result)

    def leftovers(self) -> list[int]:
        """Host processes of this test's runs that are still alive."""
        return [pid for marker in self.markers for pid in marked_processes(marker)]


def _describe(result: RunResult) -> str:
    return (
        f"exit={result.exit_code} signal={result.signal} timed_out={result.timed_out} "
        f"oom_killed={result.oom_killed} truncated={result.truncated}\n"
        f"stdout={result.stdout[-600:]!r}\nstderr={result.stderr[-600:]!r}"
    )
