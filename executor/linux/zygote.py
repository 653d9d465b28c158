"""The zygote for stateless runs: each run starts from an already-initialised interpreter.

One long-lived template process per backend (executor/policy/zygote_child.py) runs in a bwrap
sandbox of its own and forks every run into fresh namespaces; see docs/zygote.md for the design
and the trust argument. This is the host side: it starts the template, sends it one request per
run (the run's pipes, passed with SCM_RIGHTS, and nothing else: the job goes from here straight
to the program), puts the run's first process in the run's own cgroups before any of the run's
code exists, and hands the backend a `ZygoteRun`, which the RunLoop drives like a pool.Sandbox.

Whatever goes wrong here makes the backend fall back to a per-run bwrap sandbox.
"""

from __future__ import annotations

import array
import contextlib
import itertools
import logging
import marshal
import math
import os
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, cast

from executor.errors import SandboxFailed
from executor.limits import Limits
from executor.linux import fdwait
from executor.linux.cgroup_stock import CgroupStock
from executor.linux.cgroups import SandboxCgroup
from executor.linux.kernel_files import nspid, write_text
from executor.linux.pool import Sandbox
from executor.policy import wire
from executor.policy.bwrap_args import (
    HARD_KILL_GRACE_S,
    IMAGE_CAPS,
    SandboxFds,
    bwrap_argv,
    driver_source,
    launch_argv,
)
from executor.policy.sandbox_policy import SandboxPolicy, program_env
from executor.policy.seccomp import seccomp_bpf, seccomp_pipe

logger = logging.getLogger(__name__)

# The template's own sandbox: tiny scratch space (runs mount their own), and a cgroup that holds
# the template and each run's first process until the host places it, never a run's program.
TEMPLATE_LIMITS = Limits(
    memory_mib=128, max_pids=512, workdir_quota_mib=1, tmp_quota_mib=1, wall_time_s=1
)
# The launcher's hard kill of the template (its maximum); the backend then starts a new one.
TEMPLATE_MAX_AGE_S = 6 * 24 * 3600
# Age after which the template is replaced (its runs finish first): runs of one template share
# its string hash seed and address-space layout (docs/zygote.md).
TEMPLATE_RETIRE_S = 600.0
# Failed run starts in a row on a live template before it is replaced.
MAX_FAILURES = 3
# How long a run's first process may take to ask for its cgroups.
PLACE_TIMEOUT_S = 10.0
# How long a destroyed run's first process may take to end and be reaped by the template.
REAPED_TIMEOUT_S = 5.0
TEMPLATE_CGROUP_PREFIX = "undoable-zygote-"
_counter = itertools.count()

# python3 -c: read the payload (both sources, the BPF, the image caps) and start serving.
_BOOTSTRAP = """import marshal, os, sys
def _read(fd, size):
    data = b""
    while len(data) < size:
        part = os.read(fd, size - len(data))
        if not part:
            os._exit(125)
        data += part
    return data
_fd = int(sys.argv[1])
_payload = marshal.loads(_read(_fd, int.from_bytes(_read(_fd, 5)[1:], "big")))
os.close(_fd)
_zygote = type(sys)("undoable_zygote")
exec(compile(_payload["zygote"], "zygote_child.py", "exec"), _zygote.__dict__)
_zygote.start(_payload, int(sys.argv[2]))
"""


class ZygoteUnavailable(SandboxFailed):
    """The template could not start a run; the backend falls back to a per-run sandbox."""


def _child_source() -> str:
    return (Path(__file__).resolve().parents[1] / "policy" / "zygote_child.py").read_text()


def payload_body(**extra: object) -> bytes:
    """What the template starts from: both sources, the runs' BPF, the image caps, what of
    the policy is the same for every run (the rest comes with each run's request), `extra`."""
    policy = SandboxPolicy.of(TEMPLATE_LIMITS)
    return marshal.dumps(
        {
            "zygote": _child_source(),
            "driver": driver_source(),
            "bpf": seccomp_bpf(),
            "caps": (IMAGE_CAPS.max_count, IMAGE_CAPS.max_image_bytes),
            "env": program_env({}),
            "hostname": policy.hostname.encode(),
            "dev_shm_bytes": policy.dev_shm_bytes,
            **extra,
        }
    )


def _payload() -> bytes:
    return wire.frame(b"z", payload_body())


class _Pipes:
    """The host's ends of a run's stdio, where RunLoop looks for them (Popen's attributes)."""

    def __init__(self, stdin_w: int, stdout_r: int, stderr_r: int) -> None:
        self.stdin = open(stdin_w, "wb", buffering=0)  # noqa: SIM115 - closed by destroy()
        self.stdout = open(stdout_r, "rb", buffering=0)  # noqa: SIM115
        self.stderr = open(stderr_r, "rb", buffering=0)  # noqa: SIM115

    def close(self) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            with contextlib.suppress(OSError):
                stream.close()


class ZygoteRun(Sandbox):
    """One run forked from the template, in its own namespaces and cgroups.

    The RunLoop uses it like a Sandbox: stdio pipes, job and status pipes, the cgroup,
    signal_program, which finds the run's processes through its cgroup (as for a Sandbox), and
    kill, which reaches its PID 1 through a pidfd. Its cgroups go back to `cgroups` once
    nothing of the run is left.
    """

    def __init__(
        self,
        pipes: _Pipes,
        job_w: int,
        status_r: int,
        cgroup: SandboxCgroup,
        place: socket.socket,
        cgroups: CgroupStock,
        on_destroyed: Callable[[], None],
    ) -> None:
        self.proc = cast(subprocess.Popen[bytes], pipes)
        self._place = place
        self._cgroups = cgroups
        self._on_destroyed = on_destroyed
        self._pipes = pipes
        self.job_w = job_w
        self.status_r = status_r
        self.cgroup: SandboxCgroup | None = cgroup
        self._run_cgroup = cgroup
        self.started_at = time.monotonic()
        self.ready = False  # set by wait_ready() when the warm pool holds it
        self._destroyed = False
        self._killed = False
        self.pidfd: int | None = None  # the run's PID 1, once placed (Template.spawn)

    def failure_detail(self) -> str:
        return ""  # the run's own stderr pipe carries the template's complaint

    def kill(self) -> None:
        """SIGKILL the run's PID 1: the kernel then kills its whole pid namespace, which holds
        everything in the run's cgroups (only PID 1 was placed there; the rest are its
        descendants). Before placement, whatever its cgroups hold."""
        self._killed = True
        if self.pidfd is None:
            super().kill()
            self._run_cgroup.kill_all()
            return
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def _kill_group(self) -> None:
        self._run_cgroup.kill_all()

    def destroy(self, *, exiting: bool = False) -> None:
        """Kill what is left of the run, close our ends, wait until the template has reaped
        the run's first process (then no process of the run is left) and give its cgroups
        back."""
        if self._destroyed:
            return
        self._destroyed = True
        self.kill()
        self._pipes.close()
        for fd in (self.job_w, self.status_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            self._place.shutdown(socket.SHUT_WR)  # a run never let go (not placed) ends now
        if not _reaped(self._place, REAPED_TIMEOUT_S):
            logger.warning("zygote run not reaped in time")
        self._place.close()
        if self.pidfd is not None:
            # Forgotten as it is closed: its number may soon be another run's pidfd.
            pidfd, self.pidfd = self.pidfd, None
            os.close(pidfd)
        # A group that still holds a process is killed and removed there.
        self._cgroups.give_back(self._run_cgroup)
        self._on_destroyed()


class TemplateHost(Protocol):
    """What a template runs in: a bwrap sandbox (`BwrapHost`) or a Docker container
    (backends/docker/template.py)."""

    def alive(self) -> bool: ...

    def pids(self) -> set[int]:
        """The processes it holds: the template and runs' first processes not yet placed."""
        ...

    def end(self) -> None:
        """The control socket is closed, so the template is exiting: wait a little, then kill
        what is left and release what hosted it."""
        ...

    def failure_detail(self) -> str:
        """What the dead template wrote on its stderr."""
        ...


class BwrapHost:
    """The template's bwrap sandbox: its launcher process and its cgroups."""

    def __init__(self, proc: subprocess.Popen[bytes], cgroup: SandboxCgroup | None) -> None:
        self.proc = proc
        self.cgroup = cgroup

    def alive(self) -> bool:
        return self.proc.poll() is None

    def pids(self) -> set[int]:
        return self.cgroup.pids() if self.cgroup is not None else set()

    def end(self) -> None:
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, 9)
            if self.cgroup is not None:
                self.cgroup.kill_all()
            self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        if self.cgroup is not None:
            self.cgroup.remove()

    def failure_detail(self) -> str:
        if self.proc.poll() is None or self.proc.stderr is None:
            return ""
        return self.proc.stderr.read(4096).decode("utf-8", "replace").strip()


class Template:
    """The template process of one backend, in its `host`. Create with `Template.start(...)`
    (a bwrap sandbox) or backends/docker/template.py; `close()`."""

    def __init__(self, host: TemplateHost, control: socket.socket) -> None:
        self.host = host
        self.control = control
        self.started_at = time.monotonic()
        self._lock = threading.Lock()
        self._live = 0  # runs forked and not yet destroyed
        self._retired = False
        self._ended = False

    @classmethod
    def start(
        cls, *, rootfs: str, host_uid: int | None, cgroup_parents: dict[str, str]
    ) -> Template:
        """Start the template's bwrap sandbox.

        Not through spawn.spawn_sandbox: the template needs its own seccomp variant and a
        control socket, where that function hands every sandbox the full filter and its pipes.
        """
        cgroup = _template_cgroup(cgroup_parents) if cgroup_parents else None
        theirs: list[int] = []
        ours: socket.socket | None = None
        try:
            if cgroup is not None:
                cgroup.apply(TEMPLATE_LIMITS)
            seccomp_r = seccomp_pipe(zygote=True)
            theirs.append(seccomp_r)
            payload_r, payload_w = os.pipe()
            theirs.append(payload_r)
            ours, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            theirs.append(child.detach())
            command = ["/usr/bin/python3", "-I", "-c", _BOOTSTRAP, str(payload_r), str(theirs[2])]
            fds = SandboxFds(seccomp=seccomp_r, job=payload_r, status=theirs[2])
            argv = launch_argv(
                bwrap_argv(
                    SandboxPolicy.of(TEMPLATE_LIMITS),
                    rootfs=rootfs,
                    fds=fds,
                    command=command,
                    disable_userns=False,
                ),
                cgroup_procs=cgroup.procs_files if cgroup else (),
                host_uid=host_uid,
                hard_limit_s=TEMPLATE_MAX_AGE_S,
            )
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=tuple(theirs),
                env={},
                start_new_session=True,
            )
        except BaseException as exc:
            if ours is not None:
                ours.close()
            if cgroup is not None:
                cgroup.remove()
            if isinstance(exc, OSError):
                raise ZygoteUnavailable(f"could not start the zygote: {exc}") from exc
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        template = cls(BwrapHost(proc, cgroup), ours)
        try:
            with open(payload_w, "wb") as out:
                out.write(_payload())
        except OSError as exc:
            template.close()
            raise ZygoteUnavailable(f"could not start the zygote: {exc}") from exc
        return template

    def alive(self) -> bool:
        return self.host.alive()

    def pids(self) -> set[int]:
        """The template's processes: what hosts it (for bwrap: launcher, bwrap, the template)
        and any run's first process not yet placed; never a run's program, which is placed in
        the run's own cgroups before it starts."""
        return self.host.pids()

    def spawn(
        self,
        limits: Limits,
        *,
        wall_s: float,
        cgroups: CgroupStock,
        expected_uid: int,
    ) -> ZygoteRun:
        """Fork a run for `limits`, placed in cgroups of its own (empty, from `cgroups`) and
        waiting for its job."""
        cgroup = cgroups.take()
        theirs: list[int] = []
        ours: list[int] = []
        place: socket.socket | None = None
        try:
            cgroup.apply(limits)
            for _ in range(5):  # stdin, stdout, stderr, job, status
                read_end, write_end = os.pipe()
                theirs.append(read_end)
                ours.append(write_end)
            # The run reads stdin and job, writes stdout, stderr and status.
            for index in (1, 2, 4):
                theirs[index], ours[index] = ours[index], theirs[index]
            place, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            theirs.append(child.detach())
            place.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            hard_s = math.ceil(wall_s + HARD_KILL_GRACE_S)
            policy = SandboxPolicy.of(limits)
            request = b"run %d %d %d" % (hard_s, policy.tmp_bytes, policy.workdir_bytes)
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", theirs).tobytes())]
            self.control.sendmsg([request], rights)
        except BaseException as exc:
            for fd in ours:
                os.close(fd)
            if place is not None:
                place.close()
            cgroups.give_back(cgroup)
            if isinstance(exc, OSError):
                raise ZygoteUnavailable(f"the zygote took no request: {exc}") from exc
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        with self._lock:
            self._live += 1
        run = ZygoteRun(
            _Pipes(ours[0], ours[1], ours[2]),
            ours[3],
            ours[4],
            cgroup,
            place,
            cgroups,
            self._run_destroyed,
        )
        try:
            run.pidfd = _place(cgroup, _placement_request(place, expected_uid))
            place.send(b"go")
        except BaseException as exc:
            detail = _complaint(ours[2])
            run.destroy()
            if isinstance(exc, ZygoteUnavailable):
                raise ZygoteUnavailable(f"{exc}: {detail}") from exc
            if isinstance(exc, OSError):
                raise ZygoteUnavailable(f"could not place the run: {exc}: {detail}") from exc
            raise
        return run

    def retire(self) -> None:
        """Take no more runs; end once the runs already forked are destroyed."""
        with self._lock:
            self._retired = True
            idle = self._live == 0
        if idle:
            self.close()

    def _run_destroyed(self) -> None:
        with self._lock:
            self._live -= 1
            done = self._retired and self._live == 0
        if done:
            self.close()

    def close(self) -> None:
        """End the template: closing the control socket makes it kill its runs and exit."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
        with contextlib.suppress(OSError):
            self.control.close()
        self.host.end()

    def failure_detail(self) -> str:
        return self.host.failure_detail()


def _placement_request(place: socket.socket, expected_uid: int) -> int:
    """The run's first process's host pid, from the kernel; validated, not believed."""
    if not fdwait.wait_readable(place.fileno(), PLACE_TIMEOUT_S):
        raise ZygoteUnavailable("the run did not ask for its cgroups in time")
    message, ancdata, _, _ = place.recvmsg(16, socket.CMSG_SPACE(struct.calcsize("3i")))
    creds = [
        data
        for level, kind, data in ancdata
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS
    ]
    if message != b"place" or len(creds) != 1:
        raise ZygoteUnavailable("the run did not start")
    pid, uid, _ = struct.unpack("3i", creds[0][: struct.calcsize("3i")])
    if uid != expected_uid or pid <= 0 or nspid(pid)[-1:] != ["1"]:
        raise ZygoteUnavailable(f"unexpected placement request from pid {pid} uid {uid}")
    return pid


def _reaped(place: socket.socket, timeout_s: float) -> bool:
    """Wait for EOF on a run's placement socket: the run's first process has ended (its end
    closed with it) and the template, which keeps its copy until it has reaped that process,
    has closed its own."""
    deadline = time.monotonic() + timeout_s
    while fdwait.wait_readable(place.fileno(), max(0.0, deadline - time.monotonic())):
        try:
            if not place.recv(16):
                return True
        except OSError:
            return True
    return False


def _template_cgroup(parents: dict[str, str]) -> SandboxCgroup:
    """The template's own groups, named apart from the sandboxes' (`undoable-PID-N`): they
    hold no run, so leak checks that count sandbox groups need not know about them."""
    name = f"{TEMPLATE_CGROUP_PREFIX}{os.getpid()}-{next(_counter)}"
    dirs: dict[str, str] = {}
    try:
        for controller, parent in parents.items():
            os.mkdir(os.path.join(parent, name))
            dirs[controller] = os.path.join(parent, name)
    except OSError:
        SandboxCgroup(dirs).remove()
        raise
    return SandboxCgroup(dirs)


def _place(cgroup: SandboxCgroup, pid: int) -> int:
    """Move the run's first process into the run's cgroups; check they hold it and only it.
    Returns a pidfd for it: the process the check found, as long as that pidfd lives."""
    pidfd = os.pidfd_open(pid)
    try:
        for procs in cgroup.procs_files:
            write_text(procs, str(pid))
        # Alive after the check, the pidfd's process still owns the pid the groups hold.
        if cgroup.pids() != {pid} or not _alive(pidfd):
            raise ZygoteUnavailable("the run's cgroups do not hold exactly its first process")
    except BaseException:
        os.close(pidfd)
        raise
    return pidfd


def _alive(pidfd: int) -> bool:
    try:
        signal.pidfd_send_signal(pidfd, 0)
    except ProcessLookupError:
        return False
    return True


def _complaint(stderr_r: int) -> str:
    """What the run's first processes wrote on its stderr before failing (never blocks)."""
    if not fdwait.wait_readable(stderr_r, 0.0):
        return ""
    try:
        return os.read(stderr_r, 2000).decode("utf-8", "replace").strip()
    except OSError:
        return ""


class Zygote:
    """Keeps one template alive for a backend; replaces it when it dies or gets old.

    start_template: starts a template (`Template.start` for a bwrap sandbox, with its
        arguments bound; backends/docker/template.py for a container).
    cgroup_parents: where each run's own cgroups are made.
    expected_uid: the host uid a run's first process must have when it asks to be placed.
    """

    def __init__(
        self,
        *,
        start_template: Callable[[], Template],
        cgroup_parents: dict[str, str],
        expected_uid: int,
        max_age_s: float = TEMPLATE_RETIRE_S,
    ) -> None:
        self._start_template = start_template
        self._max_age_s = max_age_s
        self._run_cgroups = CgroupStock(cgroup_parents)
        self._expected_uid = expected_uid
        self._lock = threading.Lock()
        self._template: Template | None = None
        self._retry_at = 0.0
        self._failures = 0  # failed runs in a row on the current template
        self._restarts = 0  # templates replaced since a run last worked
        self._closed = False

    def spawn(self, limits: Limits, *, wall_s: float) -> ZygoteRun | None:
        """A run forked from the template, or None when there is no working template now."""
        template = self._current()
        if template is None:
            return None
        try:
            run = template.spawn(
                limits,
                wall_s=wall_s,
                cgroups=self._run_cgroups,
                expected_uid=self._expected_uid,
            )
        except ZygoteUnavailable:
            logger.exception("zygote run failed to start; falling back to a sandbox")
            # Replacing the template ends its other runs: only when it is dead or keeps failing.
            with self._lock:
                self._failures += 1
                broken = self._failures >= MAX_FAILURES or not template.alive()
            if broken:
                self._discard(template)
            return None
        with self._lock:
            self._failures = self._restarts = 0
        return run

    def _current(self) -> Template | None:
        old: Template | None = None
        retiring: Template | None = None
        with self._lock:
            if self._closed:
                return None
            template = self._template
            if template is not None and not template.alive():
                old, template, self._template = template, None, None
            elif template is not None and time.monotonic() - template.started_at > self._max_age_s:
                # A new hash seed and address-space layout for the runs from now on.
                retiring, template, self._template = template, None, None
            if template is None and time.monotonic() >= self._retry_at:
                try:
                    template = self._start_template()
                    self._template = template
                except SandboxFailed:
                    logger.exception("zygote failed to start")
                    self._back_off()
        if old is not None:
            old.close()
        if retiring is not None:
            retiring.retire()
        return template

    def _discard(self, template: Template) -> None:
        with self._lock:
            if self._template is template:
                self._template = None
                self._failures = 0
                self._back_off()
        logger.warning("zygote discarded", extra={"detail": template.failure_detail()[-500:]})
        template.close()

    def _back_off(self) -> None:
        self._restarts += 1
        self._retry_at = time.monotonic() + min(30.0, 0.1 * 2**self._restarts)

    def template_pids(self) -> set[int]:
        """The current template's processes (Template.pids), alive until `close()`."""
        with self._lock:
            template = self._template
        return template.pids() if template is not None else set()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            template, self._template = self._template, None
        if template is not None:
            template.close()
        # Runs destroyed after this (the backend's reaper) remove their groups instead.
        self._run_cgroups.close()
