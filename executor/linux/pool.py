"""Started bwrap sandboxes, the warm pool that keeps a few waiting for their one job, and the
reaper that destroys them after it.

A `Sandbox` is one bwrap process tree whose in-sandbox driver (executor/policy/supervisor.py) has
a python3 interpreter up and is blocked on its job pipe. A cold run starts one and sends the
job at once; the warm pool starts them ahead of time so a run only pays for a fork. Every
sandbox runs exactly one job and is then destroyed: nothing carries over between runs. The
`Reaper` does that destruction off the run's path, so a result does not wait for it.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence

from executor.errors import SandboxFailed
from executor.limits import Limits
from executor.linux import fdwait
from executor.linux.cgroups import SandboxCgroup
from executor.linux.kernel_files import nspid
from executor.linux.spawn import spawn_sandbox
from executor.policy import wire
from executor.policy.bwrap_args import bwrap_argv, driver_payload
from executor.policy.mounts import Mount
from executor.policy.sandbox_policy import SandboxPolicy

logger = logging.getLogger(__name__)

# How long a sandbox whose supervisor has reported gets to end on its own before it is killed.
_EXIT_GRACE_S = 1.0
# Teardowns queued at most; past that a run tears its sandbox down itself (backpressure).
REAPER_MAX_PENDING = 32
# While a run taken from the pool is in flight and the pool still holds a sandbox, its refill
# waits (at most this long): starting a sandbox takes CPU the running program and the reply to
# its caller are waiting for (docs/benchmarks.md).
REFILL_DEFER_S = 0.02
# And once that run has its result, a little longer: its reply is still on its way to the
# caller, through the web server's threads, which the refill's start-up would hold up
# (docs/benchmarks.md, "Cgroups kept for the next run, and the reply's CPU left alone").
REFILL_SETTLE_S = 0.004
# A used sandbox is torn down this long after its run's result, for the same reason (an
# unhurried reaper; one with a backlog does not wait).
REAP_SETTLE_S = 0.004


class Sandbox:
    """One started single-use sandbox. Create with `Sandbox.start(...)`; always `destroy()`."""

    def __init__(
        self, proc: subprocess.Popen[bytes], job_w: int, status_r: int, cgroup: SandboxCgroup | None
    ) -> None:
        self.proc = proc
        self.job_w = job_w
        self.status_r = status_r
        self.cgroup = cgroup
        self.started_at = time.monotonic()
        self.ready = False
        self._destroyed = False
        self._killed = False

    @classmethod
    def start(
        cls,
        *,
        rootfs: str,
        limits: Limits,
        hard_limit_s: float,
        host_uid: int | None,
        cgroup_parents: dict[str, str],
        mounts: Sequence[Mount] = (),
    ) -> Sandbox:
        """Start bwrap (with `mounts` bound in, see executor/policy/mounts.py); the driver
        then waits for its one job. Pooled sandboxes are started without mounts."""
        policy = SandboxPolicy.of(limits, mounts=mounts)
        spawned = spawn_sandbox(
            lambda fds, _cgroup: bwrap_argv(policy, rootfs=rootfs, fds=fds),
            limits=limits,
            cgroup_parents=cgroup_parents,
            host_uid=host_uid,
            hard_limit_s=hard_limit_s,
            stdio=(subprocess.PIPE, subprocess.PIPE, subprocess.PIPE),
            what="bwrap",
        )
        sandbox = cls(spawned.proc, spawned.job_w, spawned.status_r, spawned.cgroup)
        try:
            # The supervisor itself comes first on the job pipe; it fits the pipe's buffer.
            os.write(spawned.job_w, driver_payload(rootfs))
        except BaseException as exc:
            sandbox.destroy()  # started but never fed: killed and reaped now, not at hard kill
            if isinstance(exc, OSError):
                raise SandboxFailed(f"could not start bwrap: {exc}") from exc
            raise
        return sandbox

    def wait_ready(self, timeout_s: float) -> None:
        """Block until the driver is up and waiting for its job; SandboxFailed otherwise."""
        try:
            first = (
                os.read(self.status_r, len(wire.READY))
                if fdwait.wait_readable(self.status_r, timeout_s)
                else b""
            )
            if first != wire.READY:
                detail = self.failure_detail()
                raise SandboxFailed(f"sandbox did not start: {detail or 'no ready signal'}")
        except BaseException:
            # Destroyed here, at once: a sandbox that never got ready must not wait for the
            # launcher's hard kill with its processes and cgroup.
            self.destroy()
            raise
        self.ready = True

    def waiting(self) -> bool:
        """A ready sandbox still waits for its job: its status pipe holds no status and no EOF
        (it would, had its processes been killed meanwhile, or died with a zygote template)."""
        return not fdwait.wait_readable(self.status_r, 0.0)

    def failure_detail(self) -> str:
        """bwrap's own complaint, if it exited before the driver ran."""
        if self.proc.poll() is None or self.proc.stderr is None:
            return ""
        return self.proc.stderr.read(4096).decode("utf-8", "replace").strip()

    def _inside_pids(self) -> dict[int, str]:
        """host pid -> pid inside the sandbox, for the sandbox's processes (needs the cgroup)."""
        found: dict[int, str] = {}
        for pid in self.cgroup.pids() if self.cgroup is not None else ():
            inside = nspid(pid)
            if len(inside) > 1:
                found[pid] = inside[-1]
        return found

    def signal_program(self, sig: int) -> None:
        """Send `sig` to every process inside the sandbox except its supervisor (PID 1)."""
        for pid, inside in self._inside_pids().items():
            if inside != "1":
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)

    def kill(self) -> None:
        """SIGKILL the sandbox.

        Killing the sandbox's PID 1 makes the kernel kill everything in its namespace, and
        lets each bwrap process reap its child on the way out (killing bwrap first would
        orphan them as zombies for the host's init). Without a cgroup to find PID 1, kill
        the launcher's process group: --die-with-parent takes the rest down.
        """
        self._killed = True
        init = [pid for pid, inside in self._inside_pids().items() if inside == "1"]
        for pid in init:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if not init:
            self._kill_group()

    def _kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.kill_all()

    def destroy(self, *, exiting: bool = False) -> None:
        """Kill whatever is left, reap, close our pipe ends and remove the cgroups.

        `exiting`: the supervisor has reported and is ending the sandbox itself; let bwrap reap
        its children and exit (killing bwrap first would orphan them) before killing anything.
        """
        if self._destroyed:
            return
        self._destroyed = True
        if exiting and not self._killed:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=_EXIT_GRACE_S)
        if self.proc.poll() is None:
            if not self._killed:
                self.kill()
            try:
                self.proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self._kill_group()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        for fd in (self.job_w, self.status_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.cgroup is not None:
            self.cgroup.remove()


def pool_fits(limits: Limits, pool: Limits) -> bool:
    """Whether a run with `limits` may take a sandbox started for `pool`: same scratch sizes,
    no longer wall time (the rest is applied per run)."""
    return (
        limits.workdir_quota_mib == pool.workdir_quota_mib
        and limits.tmp_quota_mib == pool.tmp_quota_mib
        and limits.wall_time_s <= pool.wall_time_s
    )


class WarmPool:
    """Keeps `size` ready sandboxes; refilled by a background thread; never reuses one."""

    def __init__(self, start_sandbox, size: int, max_idle_s: float) -> None:  # type: ignore[no-untyped-def]
        self._start = start_sandbox
        self._size = size
        self._max_idle_s = max_idle_s
        self._ready: collections.deque[Sandbox] = collections.deque()
        self._in_flight = 0  # taken and not yet given back with `done()`
        self._last_done = 0.0
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._refill, name="bwrap-warm-pool", daemon=True)
        self._thread.start()

    def take(self) -> Sandbox | None:
        """A ready sandbox, or None when the pool is empty right now (caller starts one cold).
        The caller calls `done()` once the run in it has its result."""
        dead: list[Sandbox] = []
        sandbox: Sandbox | None = None
        with self._cond:
            while self._ready and sandbox is None:
                sandbox = self._ready.popleft()
                if not sandbox.waiting():
                    dead.append(sandbox)
                    sandbox = None
            if sandbox is not None:
                self._in_flight += 1
            self._cond.notify_all()
        for gone in dead:
            gone.destroy()
        return sandbox

    def done(self) -> None:
        """A run in a sandbox from `take()` has its result."""
        with self._cond:
            self._in_flight -= 1
            self._last_done = time.monotonic()
            self._cond.notify_all()

    def wait_full(self, timeout_s: float) -> bool:
        """Block until the pool holds `size` sandboxes (warm-up before benchmarks)."""
        with self._cond:
            return self._cond.wait_for(
                lambda: len(self._ready) >= self._size or self._closed, timeout_s
            )

    def __len__(self) -> int:
        return len(self._ready)

    def _refill(self) -> None:
        failures = 0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or len(self._ready) < self._size, 5.0)
                if self._closed:
                    return
                self._cond.wait_for(
                    lambda: self._closed or not self._in_flight or not self._ready,
                    REFILL_DEFER_S,
                )
                settled_at = self._last_done + REFILL_SETTLE_S
                while self._ready and not self._closed and time.monotonic() < settled_at:
                    self._cond.wait(settled_at - time.monotonic())
                stale = [s for s in self._ready if self._expired(s)]
                for sandbox in stale:
                    self._ready.remove(sandbox)
                need = not self._closed and len(self._ready) < self._size
            for sandbox in stale:
                sandbox.destroy()
            if not need:
                continue
            try:
                sandbox = self._start()
                sandbox.wait_ready(10.0)  # destroys the sandbox itself when it fails
                failures = 0
            except Exception:
                failures += 1
                logger.exception("warm sandbox failed to start", extra={"failures": failures})
                # Back off so a broken host does not spin; runs fall back to cold starts.
                with self._cond:
                    self._cond.wait(min(30.0, 0.1 * 2**failures))
                continue
            with self._cond:
                if self._closed:
                    closed = True
                else:
                    closed = False
                    self._ready.append(sandbox)
                    self._cond.notify_all()
            if closed:
                sandbox.destroy()

    def _expired(self, sandbox: Sandbox) -> bool:
        return time.monotonic() - sandbox.started_at > self._max_idle_s

    def close(self) -> None:
        with self._cond:
            self._closed = True
            drained = list(self._ready)
            self._ready.clear()
            self._cond.notify_all()
        self._thread.join(timeout=15)
        for sandbox in drained:
            sandbox.destroy()


class Reaper:
    """Destroys used sandboxes on a background thread; `wait_idle` / `close` wait for it.

    Every submitted sandbox is destroyed: by the thread, or by the caller itself when the
    queue is full or the reaper is closed, so teardown can lag behind runs but never be lost.
    """

    def __init__(self, max_pending: int = REAPER_MAX_PENDING) -> None:
        self._max_pending = max_pending
        # (sandbox, exiting, when its teardown is due)
        self._queue: collections.deque[tuple[Sandbox, bool, float]] = collections.deque()
        self._pending = 0  # queued plus the one being destroyed
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._reap, name="bwrap-reaper", daemon=True)
        self._thread.start()

    def submit(self, sandbox: Sandbox, *, exiting: bool) -> None:
        """Destroy `sandbox` soon (see Sandbox.destroy for `exiting`)."""
        with self._cond:
            inline = self._closed or self._pending >= self._max_pending
            if not inline:
                self._queue.append((sandbox, exiting, time.monotonic() + REAP_SETTLE_S))
                self._pending += 1
                self._cond.notify_all()
        if inline:
            sandbox.destroy(exiting=exiting)

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until every submitted sandbox is destroyed; False if `timeout_s` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout_s)

    def close(self) -> None:
        """Destroy what is queued, then stop; later submits are destroyed by their caller."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _reap(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    return  # closed and drained
                sandbox, exiting, due = self._queue.popleft()
                self._cond.wait_for(lambda: self._closed, due - time.monotonic())
            try:
                sandbox.destroy(exiting=exiting)
            except Exception:
                # Logged, not raised: the next sandboxes must still be torn down. The
                # launcher's hard kill still ends this one's processes.
                logger.exception("sandbox teardown failed")
            finally:
                with self._cond:
                    self._pending -= 1
                    self._cond.notify_all()
