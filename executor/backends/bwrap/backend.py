"""The bubblewrap backend: every run in a fresh single-use sandbox (see executor/policy/).

A run returns as soon as the program's exit status and output are in; its sandbox is then
killed, reaped and its cgroups removed on a background thread (pool.Reaper). `close()`
and `wait_idle()` wait for those teardowns, so "nothing is left" holds once they return; the
sandboxes' cgroups are made in groups of the backend's own, which `close()` removes with
anything left in them (cgroups.owner_groups).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
from collections.abc import Sequence

from executor.backends.bwrap.session import BwrapSession
from executor.cancel import CancelToken
from executor.errors import BackendUnavailable, InvalidLimits
from executor.limits import Limits
from executor.linux import cgroups
from executor.linux.execute import execute
from executor.linux.pool import Reaper, Sandbox, WarmPool, pool_fits
from executor.linux.uids import SANDBOX_UID
from executor.linux.zygote import Template, Zygote, ZygoteRun
from executor.policy.bwrap_args import LAUNCHER, rlimit_names_known
from executor.policy.mounts import Mount, check_mounts
from executor.policy.seccomp import seccomp_bpf
from executor.result import OutputCallback, RunResult
from executor.spec import RunSpec

logger = logging.getLogger(__name__)


class BwrapBackend:
    """Runs each program in a fresh bubblewrap sandbox on the given root filesystem.

    rootfs: the sandbox root filesystem (absolute path, mounted read-only as /).
    warm_pool_size: sandboxes kept started and waiting, so a run only pays for a fork.
    pool_limits: the limits pooled sandboxes are built for; a run uses the pool when its
        tmpfs sizes and network match and its wall time is not above the pool's.
    host_uid: the unprivileged host uid bwrap runs as when we are root (SANDBOX_UID).
    use_cgroups: put each sandbox in its own memory/pids/cpu cgroup where the host allows.
    term_grace_s: time between SIGTERM and SIGKILL when a run times out or is cancelled.
    zygote: start stateless runs by forking a long-lived template process into fresh
        namespaces (docs/zygote.md) instead of one bwrap sandbox each; the warm pool then
        holds such runs. It needs cgroups; without them, when the template is unavailable,
        and for runs with mounts, runs use bwrap sandboxes as before.
    """

    name = "bwrap"

    def __init__(
        self,
        rootfs: str,
        warm_pool_size: int = 0,
        *,
        pool_limits: Limits | None = None,
        host_uid: int | None = SANDBOX_UID,
        use_cgroups: bool = True,
        term_grace_s: float = 0.5,
        pool_max_idle_s: float = 300.0,
        zygote: bool = True,
    ) -> None:
        self.rootfs = os.path.abspath(rootfs)
        self.host_uid = host_uid if os.geteuid() == 0 else None
        self.term_grace_s = term_grace_s
        parents = cgroups.available_parents() if use_cgroups else {}
        cgroups.remove_stale(parents)
        # Every group of this backend's sandboxes is made in its own, which close() removes.
        self.cgroup_parents = cgroups.owner_groups(parents) if parents else {}
        self.pool_limits = pool_limits or Limits()
        self._pool_max_idle_s = pool_max_idle_s
        self._pool: WarmPool | None = None
        self._pool_size = warm_pool_size
        self._reaper = Reaper()
        # Runs one job in a started sandbox or zygote run, then hands it to the reaper.
        self._execute = functools.partial(
            execute, reaper=self._reaper, term_grace_s=self.term_grace_s
        )
        self._zygote: Zygote | None = None
        if zygote and self.cgroup_parents:
            self._zygote = Zygote(
                start_template=functools.partial(
                    Template.start,
                    rootfs=self.rootfs,
                    host_uid=self.host_uid,
                    cgroup_parents=self.cgroup_parents,
                ),
                cgroup_parents=self.cgroup_parents,
                expected_uid=self.host_uid if self.host_uid is not None else os.getuid(),
            )
        # How many runs took a warm sandbox (a zygote run counts as one) vs started one
        # (benchmarks and tests read this); and how many of the warm ones were zygote runs.
        self.stats = {"warm": 0, "cold": 0}
        self.zygote_runs = 0

    def self_check(self) -> None:
        """Fail closed: refuse to run anything unless bwrap, the rootfs and seccomp all work."""
        if shutil.which("bwrap") is None:
            raise BackendUnavailable(
                "bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
            )
        if not os.access(LAUNCHER, os.X_OK):
            raise BackendUnavailable(
                f"the sandbox launcher {LAUNCHER} is not built: run `make launcher`"
            )
        for needed in ("usr/bin/python3", "bin/bash", "etc/passwd"):
            if not os.path.exists(os.path.join(self.rootfs, needed)):
                raise BackendUnavailable(
                    f"sandbox root filesystem {self.rootfs} is missing {needed}; "
                    "build it with `make sandbox-rootfs`"
                )
        seccomp_bpf()
        if not rlimit_names_known():
            raise BackendUnavailable("this Python lacks an rlimit the sandbox policy needs")
        result = self._run_cold(RunSpec(code="print(6*7)"), self.pool_limits, None, None)
        if result.stdout != "42\n" or result.exit_code != 0:
            raise BackendUnavailable(
                f"bwrap sandbox self-test failed: exit={result.exit_code} "
                f"signal={result.signal} stderr={result.stderr[-500:]!r}"
            )
        if self._zygote is not None:
            self._zygote_self_check()
        if self._pool_size > 0 and self._pool is None:
            self._pool = WarmPool(self._start_pooled, self._pool_size, self._pool_max_idle_s)

    def run(
        self,
        spec: RunSpec,
        *,
        limits: Limits,
        on_output: OutputCallback | None = None,
        cancel: CancelToken | None = None,
        mounts: Sequence[Mount] = (),
    ) -> RunResult:
        """Run `spec` in a single-use sandbox; see executor.run for the contract.

        With `mounts` the sandbox is always started for this run: pooled sandboxes were
        started without them, and bind mounts cannot be added to a running sandbox.
        """
        if limits.network != "none":
            raise InvalidLimits("the bwrap backend only supports network='none' for now")
        mounts = check_mounts(mounts)  # refuse before anything is started
        if mounts:
            self.stats["cold"] += 1
            return self._run_cold(spec, limits, on_output, cancel, mounts)
        pool = self._pool
        sandbox = pool.take() if pool is not None and pool_fits(limits, self.pool_limits) else None
        if sandbox is not None:
            assert pool is not None
            self._count_warm(sandbox)
            try:
                return self._execute(sandbox, spec, limits, on_output, cancel)
            finally:
                pool.done()
        if self._zygote is not None:
            if cancel is not None and cancel.cancelled:
                return _cancelled_before_start()
            sandbox = self._zygote.spawn(limits, wall_s=limits.wall_time_s + self.term_grace_s)
        if sandbox is None:
            self.stats["cold"] += 1
            return self._run_cold(spec, limits, on_output, cancel)
        self._count_warm(sandbox)
        return self._execute(sandbox, spec, limits, on_output, cancel)

    @property
    def session_uid(self) -> int | None:
        return self.host_uid

    def open_session(
        self, *, session_id: str, workdir: str, limits: Limits, lifetime_s: float
    ) -> BwrapSession:
        """A session in a long-lived bwrap sandbox of its own (session.py), in cgroups of this
        backend's groups; see Backend.open_session. `session_id` names nothing here: the
        sandbox is known by its process."""
        return BwrapSession.start(
            rootfs=self.rootfs,
            workdir=workdir,
            limits=limits,
            lifetime_s=lifetime_s,
            host_uid=self.host_uid,
            cgroup_parents=self.cgroup_parents,
        )

    def wait_warm(self, timeout_s: float = 30.0) -> bool:
        """Block until the warm pool is full (benchmarks and tests warm up with this)."""
        return self._pool.wait_full(timeout_s) if self._pool is not None else True

    def wait_idle(self, timeout_s: float = 30.0) -> bool:
        """Block until every used sandbox is torn down (processes, cgroups, mounts gone);
        False if `timeout_s` passed first. Tests check for leftovers after this."""
        return self._reaper.wait_idle(timeout_s)

    def template_pids(self) -> set[int]:
        """The zygote template's processes (none without the zygote): the backend's own,
        alive until `close()`, never a run's. Leak checks leave them out."""
        return self._zygote.template_pids() if self._zygote is not None else set()

    def close(self) -> None:
        """Stop the warm pool and the zygote, and wait until every sandbox of this backend is
        torn down."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._zygote is not None:
            self._zygote.close()
        self._reaper.close()
        for group in self.cgroup_parents.values():
            cgroups.remove_tree(group)

    def _zygote_self_check(self) -> None:
        """A zygote that cannot run the self-test is switched off (runs use sandboxes)."""
        assert self._zygote is not None
        run = self._zygote.spawn(self.pool_limits, wall_s=self.pool_limits.wall_time_s)
        result = (
            self._execute(run, RunSpec(code="print(6*7)"), self.pool_limits, None, None)
            if run is not None
            else None
        )
        if result is None or result.stdout != "42\n" or result.exit_code != 0:
            logger.error("zygote self-test failed; runs use sandboxes", extra={"result": result})
            self._zygote.close()
            self._zygote = None

    def _start(self, limits: Limits, hard_limit_s: float, mounts: Sequence[Mount] = ()) -> Sandbox:
        return Sandbox.start(
            rootfs=self.rootfs,
            limits=limits,
            hard_limit_s=hard_limit_s,
            host_uid=self.host_uid,
            cgroup_parents=self.cgroup_parents,
            mounts=mounts,
        )

    def _start_pooled(self) -> Sandbox:
        limits = self.pool_limits
        hard_limit_s = self._pool_max_idle_s + limits.wall_time_s
        # With the zygote the pool holds runs forked from it, already placed in their cgroups
        # and waiting for their job; a bwrap sandbox only when the template is unavailable.
        forked = self._zygote.spawn(limits, wall_s=hard_limit_s) if self._zygote else None
        return forked if forked is not None else self._start(limits, hard_limit_s)

    def _run_cold(
        self,
        spec: RunSpec,
        limits: Limits,
        on_output: OutputCallback | None,
        cancel: CancelToken | None,
        mounts: Sequence[Mount] = (),
    ) -> RunResult:
        if cancel is not None and cancel.cancelled:
            return _cancelled_before_start()
        sandbox = self._start(limits, limits.wall_time_s + self.term_grace_s, mounts)
        return self._execute(sandbox, spec, limits, on_output, cancel)

    def _count_warm(self, sandbox: Sandbox) -> None:
        self.stats["warm"] += 1
        if isinstance(sandbox, ZygoteRun):
            self.zygote_runs += 1


def _cancelled_before_start() -> RunResult:
    return RunResult(
        exit_code=None,
        signal=None,
        stdout="",
        stderr="",
        timed_out=False,
        oom_killed=False,
        truncated=False,
        duration_s=0.0,
        cancelled=True,
    )
