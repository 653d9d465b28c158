"""One run in a started sandbox: the job in, output and status out, the stop explained.

Both places that hold such sandboxes use it: the bwrap backend (its sandboxes and zygote runs)
and the Docker backend's zygote runs (backends/docker/template.py).
"""

from __future__ import annotations

import logging
import marshal
import os
import signal
from dataclasses import dataclass

from executor.cancel import CancelToken
from executor.errors import InvalidSpec
from executor.limits import Limits
from executor.linux.loop import Outcome, RunLoop
from executor.linux.pool import Reaper, Sandbox
from executor.policy import wire
from executor.policy.sandbox_policy import SandboxPolicy, program_env
from executor.result import SUPERVISOR_LOST, OutputCallback, RunResult
from executor.spec import RunSpec
from executor.stops import StopFacts, limit_that_stopped
from executor.streaming import OutputPump

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Job:
    payload: bytes
    stdin: bytes


def execute(
    sandbox: Sandbox,
    spec: RunSpec,
    limits: Limits,
    on_output: OutputCallback | None,
    cancel: CancelToken | None,
    *,
    reaper: Reaper,
    term_grace_s: float,
) -> RunResult:
    """Run `spec` in a started `sandbox` (a bwrap Sandbox or a ZygoteRun) and hand the
    sandbox to `reaper`, whatever happens."""
    outcome: Outcome | None = None
    try:
        if sandbox.cgroup is not None:
            sandbox.cgroup.apply(limits)
        job = _job(spec, limits, memory_cgroup=bool(sandbox.cgroup and sandbox.cgroup.has_memory))
        pump = OutputPump(on_output, limits.max_output_bytes)
        loop = RunLoop(sandbox, pump, limits.wall_time_s, term_grace_s)
        outcome = loop.run(job.payload, job.stdin, cancel)
        # Read before teardown removes the cgroup; an OOM kill of the program is counted
        # before the supervisor can report its status.
        oom = sandbox.cgroup.oom_killed() if sandbox.cgroup is not None else False
        pids_max_hit = sandbox.cgroup.pids_max_hit() if sandbox.cgroup is not None else False
    finally:
        # Always torn down, off this thread: the result need not wait for bwrap to exit.
        reported = outcome is not None and outcome.status is not None
        reaper.submit(sandbox, exiting=reported)
    status = outcome.status
    if status is None:
        if not (outcome.killed or oom):
            return _supervisor_lost(pump, outcome)
        exit_code, sig = None, signal.SIGKILL.value
    elif os.WIFSIGNALED(status):
        exit_code, sig = None, os.WTERMSIG(status)
    else:
        exit_code, sig = os.WEXITSTATUS(status), None
    facts = StopFacts(
        exit_code=exit_code,
        signal=sig,
        cpu_s=outcome.cpu_s,
        runnable_s=outcome.runnable_s,
        wall_timer_fired=outcome.timed_out,
        output_capped=pump.truncated,
        oom_killed=oom,
        pids_max_hit=pids_max_hit,
        cancelled=outcome.cancelled,
    )
    limit = limit_that_stopped(facts, limits)
    return RunResult(
        exit_code=exit_code,
        signal=sig,
        stdout=pump.stdout,
        stderr=pump.stderr,
        timed_out=outcome.timed_out or limit == "cpu_time",
        oom_killed=oom,
        truncated=pump.truncated,
        duration_s=outcome.duration_s,
        cancelled=outcome.cancelled,
        limit=limit,
        images=outcome.images.images,
        image_notes=outcome.images.notes,
    )


def _supervisor_lost(pump: OutputPump, outcome: Outcome) -> RunResult:
    """A failed run, said so on its stderr: the supervisor ended with no status for it (what
    the program did to it, or bwrap's own failure, whose complaint shares the stderr pipe)."""
    tail = pump.stderr[-500:]
    logger.warning("a sandbox's supervisor ended without a status", extra={"tail": tail})
    if outcome.refused is not None:
        pump.host_line(f"The host refused the sandbox's status: {outcome.refused}.")
    pump.host_line(SUPERVISOR_LOST)
    return RunResult(
        exit_code=None,
        signal=None,
        stdout=pump.stdout,
        stderr=pump.stderr,
        timed_out=False,
        oom_killed=False,
        truncated=pump.truncated,
        duration_s=outcome.duration_s,
        cancelled=outcome.cancelled,
    )


def _job(spec: RunSpec, limits: Limits, *, memory_cgroup: bool) -> _Job:
    total = sum(len(data) for data in spec.files.values())
    if total > limits.workdir_quota_mib * 1024 * 1024:
        raise InvalidSpec("files are larger than the working directory quota")
    message = {
        "code": spec.code,
        "language": spec.language,
        "interpreter_mode": spec.interpreter_mode,
        "env": program_env(spec.env),
        "files": dict(spec.files),
        "rlimits": SandboxPolicy.of(limits).rlimits(memory_cgroup=memory_cgroup),
    }
    # marshal: the driver must not import json (see executor/policy/supervisor.py).
    return _Job(payload=wire.frame(b"j", marshal.dumps(message)), stdin=spec.stdin)
