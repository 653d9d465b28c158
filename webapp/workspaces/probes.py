"""A rest action's probe: after its reverse program ran, a program the proposal (or the agent)
declared checks that the forward call's effect is gone; exit 0 says it is.

The probe is the LLM's or the agent's code like the reverse program, so it runs like one: in
the sandbox, behind the same egress proxy with the same allowed hosts, credentials and
FORWARD_OUTPUT (the reverse run's spec with only the code swapped). The host makes no request
to a named host itself. Its outcome is recorded on the reverse run (`Run.probe`) and shown with
the undo; its output is not kept (it may carry what the credentials fetched).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from webapp.executor_glue import ExecutorError, Limits, RunResult, RunSpec, executor_get
from webapp.runs.models import Run, RunDirection
from webapp.workspaces.jobs import allow_private
from webapp.workspaces.models import control_base

logger = logging.getLogger(__name__)


def probe_after_reverse(run: Run, spec: RunSpec, limits: Limits, reverse: RunResult) -> None:
    """Run the query's probe after its reverse program `reverse` succeeded (`spec` is the
    reverse run's, hosts and FORWARD_OUTPUT included) and record the outcome on `run`."""
    code = run.query.probe_code
    if run.direction != RunDirection.REVERSE or not code.strip() or not reverse.ok:
        return
    try:
        executor = executor_get()
        with executor.egress_prepared(
            dataclasses.replace(spec, code=code),
            limits=limits,
            control_base=control_base(),
            allow_private=allow_private(),
        ) as job:
            result = executor.run(job.spec, limits=job.limits, mounts=job.mounts)
            refused = job.finish(result)
    except ExecutorError as exc:  # the reverse program's own outcome stands
        outcome: dict[str, Any] = {"passed": False, "error": f"the probe could not run: {exc}"}
    else:
        outcome = {
            "passed": result.exit_code == 0 and not result.timed_out,
            "exit_code": result.exit_code,
            "limit": result.limit,
            "refused_hosts": sorted(set(refused))[:20],
        }
    Run.objects.filter(pk=run.pk).update(probe=outcome)
    run.probe = outcome  # the worker's row, whose end entry records it (audit_run_end)
    logger.info("rest probe ran", extra={"run_id": run.pk, "passed": outcome["passed"]})
