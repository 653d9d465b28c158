"""Stateful sessions: a long-lived sandbox per session holding a Python REPL and a workspace.

    backend = executor.create_backend("bwrap", rootfs="/path/to/rootfs")
    config = SessionConfig(root_dir="/var/lib/undoable/sessions", limits=Limits(wall_time_s=30))
    manager = SessionManager(config, backend)
    session = manager.create()
    session.exec("x = 21")
    session.exec("x * 2").stdout          # "42\\n"
    session.write_file("data.bin", b"...")
    manager.close(session.id)

Sessions idle longer than `idle_timeout_s`, or older than `max_lifetime_s`, are reaped by a
background thread: the sandbox is SIGKILLed and its workspace removed. The hard lifetime also
holds if this process dies (the launcher's hard kill and --die-with-parent under bwrap; under
Docker the supervisor's deadline, and the container ends as soon as this process's socket
closes).

The manager prepares each workspace and keeps the sessions' books; the sandbox itself comes from
the backend it is given, through the Backend protocol only (`open_session`, executor/backends/
base.py), like a stateless run. The manager does not own that backend: whoever built it closes
it, after `shutdown()`.

Each workspace is a host folder bound into the sandbox. Where this process may mount (root), it
is a tmpfs capped at `workdir_quota_mib` and `workdir_max_inodes` (executor.quota), so the kernel
answers ENOSPC past the quota; elsewhere only RLIMIT_FSIZE caps each file, and the manager warns
once that workspaces are unquota'd.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from executor import images, quota
from executor.backends.base import Backend, ReplyTooLarge, SessionChannel, SessionDied
from executor.errors import BackendUnavailable, ExecutorError, InvalidSpec, NoCapacity
from executor.limits import Limits
from executor.result import LimitName, RunResult
from executor.sessions import files as session_files
from executor.sessions.config import SessionConfig
from executor.sessions.files import FileEntry

logger = logging.getLogger(__name__)

# A cell that ignores its alarm (stuck in C code) gets this long before the session is killed.
_CELL_GRACE_S = 3.0
# How long closing a session waits for a cell in flight to see its sandbox end and return.
_CELL_RETURN_S = 10.0


class SessionNotFound(ExecutorError):
    """No live session with that id (never existed, closed, or reaped)."""


class SessionBusy(ExecutorError):
    """The session is already running a cell; sessions run one command at a time."""


class Session:
    """One live session. Thread-safe; commands run one at a time."""

    def __init__(
        self,
        session_id: str,
        sandbox: SessionChannel,
        workdir: str,
        config: SessionConfig,
        uid: int | None,
    ) -> None:
        self.id = session_id
        self.workdir = workdir
        self.config = config
        self.uid = uid  # the host uid the sandbox's program runs as; it owns uploads
        self.created_at = time.monotonic()
        self.last_used_at = self.created_at
        self.closed_reason: str | None = None
        self._sandbox = sandbox
        self._lock = threading.Lock()  # held while a cell runs
        self._release_lock = threading.Lock()
        self._released = False

    @property
    def pid(self) -> int:
        """Host pid of the sandbox's outermost process (tests check it is really gone)."""
        return self._sandbox.pid

    @property
    def expires_at(self) -> float:
        """Monotonic time when this session is reaped unless used again."""
        idle = self.last_used_at + self.config.idle_timeout_s
        return min(idle, self.created_at + self.config.max_lifetime_s)

    def touch(self) -> None:
        self.last_used_at = time.monotonic()

    def exec(
        self, code: str, *, language: str = "python", timeout_s: float | None = None
    ) -> RunResult:
        """Run a Python cell (state persists) or a bash command in the session's workspace."""
        if language not in ("python", "bash"):
            raise InvalidSpec(f"unknown language {language!r}")
        cap = self.config.limits.wall_time_s
        timeout = cap if timeout_s is None else timeout_s
        if not 0 < timeout <= cap:
            raise InvalidSpec(f"timeout_s must be > 0 and <= {cap:g}")
        if not self._lock.acquire(blocking=False):
            raise SessionBusy(f"session {self.id} is running another command")
        try:
            self._check_open()
            self.touch()
            started = time.monotonic()
            # A cell's images are what it added or changed in output/, read by the host.
            before = images.snapshot(self.workdir)
            try:
                self._sandbox.send({"language": language, "code": code, "timeout_s": timeout})
                reply = self._sandbox.receive(deadline=started + timeout + _CELL_GRACE_S)
            except SessionDied as exc:
                return self._died(exc, started)
            finally:
                self.touch()
            # The reply comes from the cell's own process: a timeout counts only if the host
            # saw the time pass too.
            timed_out = bool(reply["timed_out"]) and time.monotonic() - started >= timeout
            truncated = bool(reply["truncated"])
            found = images.read_folder(self.workdir, caps=images.ImageCaps(), since=before)
            return RunResult(
                exit_code=reply["exit_code"],
                signal=None,
                stdout=reply["stdout"],
                stderr=reply["stderr"],
                timed_out=timed_out,
                oom_killed=False,
                truncated=truncated,
                duration_s=reply["duration_s"],
                limit="wall_time" if timed_out else "output" if truncated else None,
                images=found.images,
                image_notes=found.notes,
            )
        finally:
            self._lock.release()

    def _died(self, exc: SessionDied, started: float) -> RunResult:
        oom, pids = self._sandbox.stop_counters()
        too_large = isinstance(exc, ReplyTooLarge)
        timed_out = time.monotonic() - started >= self.config.limits.wall_time_s and not (
            oom or too_large
        )
        limit: LimitName | None = None
        if too_large:
            limit = "output"
        elif oom:
            limit = "memory"
        elif timed_out:
            limit = "wall_time"
        elif pids:
            limit = "pids"
        self._release("died")  # this thread holds the cell lock: kill() would wait for it
        logger.info("session sandbox died", extra={"session_id": self.id, "error": str(exc)})
        return RunResult(
            exit_code=None,
            signal=9,
            stdout="",
            stderr=f"The session's sandbox ended ({exc}); its state is lost.\n",
            timed_out=timed_out,
            oom_killed=oom,
            truncated=too_large,
            duration_s=time.monotonic() - started,
            limit=limit,
        )

    def _check_open(self) -> None:
        if self.closed_reason is not None:
            raise SessionNotFound(f"session {self.id} is closed ({self.closed_reason})")

    # Files: host-side, through the symlink-safe helpers. They count as activity.
    def write_file(self, path: str, data: bytes) -> None:
        self._check_open()
        if len(data) > self.config.limits.max_file_size_mib * 1024 * 1024:
            raise InvalidSpec(f"{path} is larger than the session's file size limit")
        self.touch()
        session_files.write_file(self.workdir, path, data, owner=self.uid)

    def read_file(self, path: str) -> bytes:
        self._check_open()
        self.touch()
        limit = self.config.limits.max_file_size_mib * 1024 * 1024
        return session_files.read_file(self.workdir, path, max_bytes=limit)

    def list_files(self, path: str = "") -> list[FileEntry]:
        self._check_open()
        self.touch()
        return session_files.list_dir(self.workdir, path)

    def delete_file(self, path: str) -> None:
        self._check_open()
        self.touch()
        session_files.delete_path(self.workdir, path)

    def kill(self, *, reason: str = "closed") -> None:
        """End the session for good: SIGKILL the sandbox and remove its workspace."""
        if self.closed_reason is None:
            self.closed_reason = reason
        # A cell may be reading the sandbox's reply on another thread (a DELETE, or a server
        # stopping, during an exec): end the processes first, so that the cell returns with
        # SessionDied, and release the descriptors only once it has.
        self._sandbox.stop()
        if self._lock.acquire(timeout=_CELL_RETURN_S):
            self._lock.release()
        else:
            logger.warning("a cell did not return after its sandbox ended", extra={"id": self.id})
        self._release(reason)

    def _release(self, reason: str) -> None:
        """Kill the sandbox and remove the workspace, once; the caller holds the cell lock or
        no cell runs."""
        if self.closed_reason is None:
            self.closed_reason = reason
        with self._release_lock:
            if self._released:
                return
            self._released = True
        self._sandbox.kill()
        try:
            quota.unmount(Path(self.workdir))
        finally:
            shutil.rmtree(os.path.dirname(self.workdir), ignore_errors=True)


class SessionManager:
    """Creates, finds and reaps the sessions of this process, in sandboxes of `backend`.

    Starting, it proves that a sandbox of the backend can use a workspace folder of this
    process (fail closed: BackendUnavailable)."""

    def __init__(
        self,
        config: SessionConfig,
        backend: Backend,
        on_close: Callable[[str, str], None] | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.on_close = on_close
        self._sessions: dict[str, Session] = {}
        self._cond = threading.Condition()
        self._stopped = False
        # The host uid the sandbox's program runs as, when this process can give it files.
        self._uid = backend.session_uid if os.geteuid() == 0 else None
        self._quota = quota.supported()
        if not self._quota:
            logger.warning(
                "session workspaces have no quota: this process may not mount a tmpfs, so only "
                "RLIMIT_FSIZE caps each file",
                extra={"workdir_quota_mib": config.workdir_quota_mib},
            )
        _check_traversable(config.root_dir, self._uid)
        os.makedirs(config.root_dir, mode=0o711, exist_ok=True)
        # Traversable (not listable) by the unprivileged sandbox uid that binds a workspace inside.
        os.chmod(config.root_dir, 0o711)  # noqa: S103
        _check_workspaces(backend, config.root_dir, config.limits, self._uid)
        self._reaper = threading.Thread(target=self._reap_loop, name="session-reaper", daemon=True)
        self._reaper.start()

    def create(self) -> Session:
        with self._cond:
            if len(self._sessions) >= self.config.max_sessions:
                raise NoCapacity("this worker holds as many sessions as it may")
        session_id = secrets.token_hex(12)
        # Canonical: the policy binds only a canonical folder (no symlink on the way).
        base = os.path.join(os.path.realpath(self.config.root_dir), session_id)
        workdir = os.path.join(base, "workspace")
        uid = self._uid
        with contextlib.ExitStack() as undo:
            undo.callback(shutil.rmtree, base, ignore_errors=True)
            os.makedirs(workdir, mode=0o700)
            os.chmod(base, 0o711)  # noqa: S103
            undo.callback(quota.unmount, Path(workdir))  # runs first: the folder is a mount
            mounted = self._quota and self._mount_quota(workdir, uid)
            if not mounted and uid is not None:
                os.chown(workdir, uid, uid)  # a quota tmpfs's root already belongs to the uid
            sandbox = self.backend.open_session(
                session_id=session_id,
                workdir=workdir,
                limits=self.config.limits,
                lifetime_s=self.config.max_lifetime_s,
            )
            undo.pop_all()
        session = Session(session_id, sandbox, workdir, self.config, uid)
        with self._cond:
            self._sessions[session_id] = session
            self._cond.notify_all()
        logger.info("session started", extra={"session_id": session_id, "pid": session.pid})
        return session

    def _mount_quota(self, workdir: str, uid: int | None) -> bool:
        """Put the workspace on its capped tmpfs, owned by the sandbox uid; False if we may not."""
        return quota.mount_tmpfs(
            Path(workdir),
            size_bytes=self.config.workdir_quota_mib * 1024 * 1024,
            max_inodes=self.config.workdir_max_inodes,
            uid=uid,
            gid=uid,
            mode=0o700,
        )

    def get(self, session_id: str) -> Session:
        with self._cond:
            session = self._sessions.get(session_id)
        if session is None or session.closed_reason is not None:
            raise SessionNotFound(f"no live session {session_id}")
        return session

    def close(self, session_id: str, *, reason: str = "closed") -> None:
        with self._cond:
            session = self._sessions.pop(session_id, None)
        if session is None:
            raise SessionNotFound(f"no live session {session_id}")
        session.kill(reason=reason)
        logger.info("session closed", extra={"session_id": session_id, "reason": reason})
        if self.on_close is not None:
            self.on_close(session_id, reason)

    def live_ids(self) -> list[str]:
        with self._cond:
            return list(self._sessions)

    def shutdown(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        for session_id in self.live_ids():
            self.close(session_id, reason="shutdown")

    def reap_due(self) -> list[str]:
        """Close every session past its idle or lifetime limit (or whose sandbox died)."""
        now = time.monotonic()
        with self._cond:
            due = [
                s
                for s in self._sessions.values()
                if (s.expires_at <= now and not s._lock.locked()) or not s._sandbox.alive
            ]
        for session in due:
            lifetime_over = now >= session.created_at + self.config.max_lifetime_s
            reason = "expired" if lifetime_over else "idle"
            if not session._sandbox.alive:
                reason = "died"
            try:
                self.close(session.id, reason=reason)
            except SessionNotFound:
                continue  # closed by a request meanwhile
        return [s.id for s in due]

    def _reap_loop(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                now = time.monotonic()
                next_due = min((s.expires_at for s in self._sessions.values()), default=now + 60)
                # Wake at the next deadline; sandboxes that die on their own are noticed within
                # a few seconds.
                self._cond.wait(timeout=max(0.05, min(next_due - now, 5.0)))
                if self._stopped:
                    return
            try:
                self.reap_due()
            except Exception:
                logger.exception("session reaper failed")


def session_root_remove(root_dir: str) -> None:
    """Remove a manager's root folder that its process left behind (killed before it could close
    its sessions): each session's quota tmpfs detached first, then the folders. Only for a root
    whose owner is gone: nothing in it may be in use."""
    root = os.path.realpath(root_dir)
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                quota.unmount(Path(entry.path, "workspace"))
    shutil.rmtree(root)


# The probe: the cell copies what the host wrote into a file the host then reads.
_PROBE_CODE = "open('from-sandbox', 'w').write(open('from-host').read())"


def _check_workspaces(backend: Backend, root_dir: str, limits: Limits, uid: int | None) -> None:
    """Fail closed unless a sandbox of `backend` sees and writes a workspace folder of this
    process. A Docker engine binds a folder by its path on the engine's host, so a remote
    engine, or a server in a container of its own, would give sessions an empty folder of
    the same name; and the sandbox uid must be able to write there."""
    probe = tempfile.mkdtemp(prefix="probe-", dir=os.path.realpath(root_dir))
    try:
        Path(probe, "from-host").write_text("host")
        if uid is not None:
            os.chown(probe, uid, uid)
        try:
            sandbox = backend.open_session(
                session_id="probe", workdir=probe, limits=limits, lifetime_s=30.0
            )
            try:
                timeout = min(10.0, limits.wall_time_s)
                sandbox.send({"language": "python", "code": _PROBE_CODE, "timeout_s": timeout})
                sandbox.receive(deadline=time.monotonic() + timeout + _CELL_GRACE_S)
            finally:
                sandbox.kill()
            seen = Path(probe, "from-sandbox").read_text()
        except (ExecutorError, OSError) as exc:
            seen = f"nothing ({exc})"
        if seen != "host":
            raise BackendUnavailable(
                f"{backend.name} session sandboxes must bind this process's session folders "
                f"({root_dir}); a probe session read back {seen!r}. A Docker engine binds by "
                "path on its own host: run the server there, as root, or use bwrap."
            )
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def _check_traversable(root_dir: str, host_uid: int | None) -> None:
    """Fail early and clearly if the unprivileged sandbox uid could not reach a workspace."""
    if host_uid is None or os.geteuid() != 0:
        return
    path = os.path.abspath(root_dir)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    while True:
        info = os.stat(path)
        if not (info.st_mode & 0o001 or info.st_uid == host_uid):
            raise BackendUnavailable(
                f"session directory {root_dir}: {path} is not traversable by uid {host_uid} "
                "(chmod o+x it or choose another directory)"
            )
        if path == "/":
            return
        path = os.path.dirname(path)
