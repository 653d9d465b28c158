"""The Docker backend's stateless runs forked from a zygote template in a container.

`ForkedRuns.start` sets it up and proves it with a run; `run` then takes a run from its warm
pool (or forks one) and drives it with the bwrap backend's own code (linux/execute.py), or
returns None when there is no working template right now: the backend then starts a container
for the run. See template.py for where the template lives and why.
"""

from __future__ import annotations

import functools
import logging
import os

from executor.backends.docker.template import (
    ClientFactory,
    remove_stale_folders,
    start_in_container,
)
from executor.cancel import CancelToken
from executor.errors import SandboxFailed
from executor.limits import Limits
from executor.linux import cgroups
from executor.linux.execute import execute
from executor.linux.pool import Reaper, Sandbox, WarmPool, pool_fits
from executor.linux.zygote import Zygote, ZygoteRun
from executor.result import OutputCallback, RunResult
from executor.spec import RunSpec

logger = logging.getLogger(__name__)

TERM_GRACE_S = 0.5
POOL_MAX_IDLE_S = 300.0


class ForkedRuns:
    """Stateless runs forked from one template container; see the module docstring."""

    def __init__(self, zygote: Zygote, cgroup_parents: dict[str, str], pool_limits: Limits):
        self._zygote = zygote
        self.cgroup_parents = cgroup_parents
        self._pool_limits = pool_limits
        self._reaper = Reaper()
        self._run = functools.partial(execute, reaper=self._reaper, term_grace_s=TERM_GRACE_S)
        self._pool: WarmPool | None = None
        self.runs = 0  # how many runs were forked (benchmarks and tests read this)

    @classmethod
    def start(
        cls,
        *,
        client: ClientFactory,
        image: str,
        uid: int,
        labels: dict[str, str],
        pool_limits: Limits,
        warm_pool_size: int,
    ) -> ForkedRuns | None:
        """Set up and self-test; None (logged) when the host cannot have it."""
        parents = cgroups.available_parents() if os.geteuid() == 0 else {}
        cgroups.remove_stale(parents)
        # The runs' groups are made in groups of our own, which close() removes.
        parents = cgroups.owner_groups(parents) if parents else {}
        if not parents:
            logger.info("no cgroups of our own: every docker run gets a container")
            return None
        remove_stale_folders()
        zygote = Zygote(
            start_template=functools.partial(
                start_in_container, client=client, image=image, uid=uid, labels=labels
            ),
            cgroup_parents=parents,
            expected_uid=uid,
        )
        forked = cls(zygote, parents, pool_limits)
        try:
            result = forked.run(RunSpec(code="print(6*7)"), pool_limits, None, None)
        except SandboxFailed:
            logger.exception("the zygote's self-test failed")
            result = None
        if result is None or result.stdout != "42\n" or result.exit_code != 0:
            logger.warning("no zygote in a container: every docker run gets a container")
            forked.close()
            return None
        if warm_pool_size > 0:
            forked._pool = WarmPool(forked._start_pooled, warm_pool_size, POOL_MAX_IDLE_S)
        return forked

    def run(
        self,
        spec: RunSpec,
        limits: Limits,
        on_output: OutputCallback | None,
        cancel: CancelToken | None,
    ) -> RunResult | None:
        """The run's result, or None when no template can fork it now."""
        pool = self._pool
        sandbox: Sandbox | None = None
        if pool is not None and pool_fits(limits, self._pool_limits):
            sandbox = pool.take()
        if sandbox is not None:
            assert pool is not None
            self.runs += 1
            try:
                return self._run(sandbox, spec, limits, on_output, cancel)
            finally:
                pool.done()
        sandbox = self._zygote.spawn(limits, wall_s=limits.wall_time_s + TERM_GRACE_S)
        if sandbox is None:
            return None
        self.runs += 1
        return self._run(sandbox, spec, limits, on_output, cancel)

    def _start_pooled(self) -> ZygoteRun:
        limits = self._pool_limits
        run = self._zygote.spawn(limits, wall_s=POOL_MAX_IDLE_S + limits.wall_time_s)
        if run is None:
            raise SandboxFailed("the zygote has no template now")
        return run

    def wait_warm(self, timeout_s: float) -> bool:
        return self._pool.wait_full(timeout_s) if self._pool is not None else True

    def wait_idle(self, timeout_s: float) -> bool:
        return self._reaper.wait_idle(timeout_s)

    def template_pids(self) -> set[int]:
        return self._zygote.template_pids()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._zygote.close()
        self._reaper.close()
        for group in self.cgroup_parents.values():
            cgroups.remove_tree(group)
