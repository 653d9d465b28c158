"""The interface every sandbox backend implements: stateless runs and session sandboxes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from executor.cancel import CancelToken
from executor.errors import SandboxFailed
from executor.limits import Limits
from executor.policy.mounts import Mount
from executor.result import OutputCallback, RunResult
from executor.spec import RunSpec


class SessionDied(SandboxFailed):
    """The session's sandbox is gone (killed, reaped, crashed); its state is lost."""


class ReplyTooLarge(SessionDied):
    """The session announced a reply past its cap; nothing more is read, the session ends."""


class SessionChannel(Protocol):
    """One live session sandbox, as `Backend.open_session` hands it out: a REPL interpreter
    that runs one cell at a time in the session's workspace.

    All it can do: `send` a cell, `receive` its reply, say whether it is `alive` and the host
    `pid` its process tree hangs from, end it (`stop`, then `kill`), and say why it ended
    (`stop_counters`). The workspace, its files and quota, and the session's bookkeeping are
    the session manager's (executor/sessions/manager.py), not the channel's.
    """

    @property
    def pid(self) -> int:
        """Host pid of the sandbox's outermost process; the interpreter runs in its tree, and
        the whole tree is gone once `kill()` returns (tests check it)."""
        ...

    @property
    def alive(self) -> bool:
        """False once the sandbox has ended, whoever ended it."""
        ...

    def send(self, message: dict[str, Any]) -> None:
        """Send one cell: {"language": "python"|"bash", "code": str, "timeout_s": float}.
        Raises SessionDied if the sandbox is gone."""
        ...

    def receive(self, *, deadline: float) -> dict[str, Any]:
        """The next reply (the driver's first one is {"ready": true}, each cell's then has
        stdout, stderr, exit_code, timed_out, truncated, duration_s). Raises SessionDied if the
        sandbox ends or the monotonic `deadline` passes first, ReplyTooLarge past the cap."""
        ...

    def stop(self) -> None:
        """End the sandbox's processes but keep its descriptors: a cell reading a reply on
        another thread sees the end (SessionDied) instead of a descriptor closed under it."""
        ...

    def kill(self) -> None:
        """End it for good: SIGKILL every process of the sandbox and release what it held
        (descriptors, cgroups, container). Idempotent."""
        ...

    def stop_counters(self) -> tuple[bool, bool]:
        """(an OOM kill happened, the pids cap was hit): why a sandbox that died ended."""
        ...


class Backend(Protocol):
    name: str

    def self_check(self) -> None:
        """Raise BackendUnavailable with a clear message unless this backend can run safely."""

    def run(
        self,
        spec: RunSpec,
        *,
        limits: Limits,
        on_output: OutputCallback | None = None,
        cancel: CancelToken | None = None,
        mounts: Sequence[Mount] = (),
    ) -> RunResult:
        """Run `spec` (see executor.run). Non-empty `mounts` need a fresh sandbox with those
        bind mounts; a backend that cannot give one raises BackendUnavailable."""
        ...

    @property
    def session_uid(self) -> int | None:
        """The host uid a session's program runs as (it owns the workspace and uploads), or
        None when this process cannot give files to another uid."""
        ...

    def open_session(
        self, *, session_id: str, workdir: str, limits: Limits, lifetime_s: float
    ) -> SessionChannel:
        """Start a session sandbox with the host folder `workdir` (canonical, prepared and
        owned by `session_uid`) bound read-write at /workspace, and return once its interpreter
        is ready. `limits` cap each cell's wall time and the whole sandbox's memory, pids and
        files; the sandbox ends at `lifetime_s` even if this process dies. Raises SandboxFailed
        when it does not start, leaving nothing behind."""
        ...

    def close(self) -> None:
        """Stop warm pools and remove everything this backend started (sessions included)."""
