"""One db-kind forward run held open for a decision: start it, then keep() or undo()."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from executor.backends.base import Backend, OutputCallback
from executor.cancel import CancelToken
from executor.kinds.db import DEFAULT_TIMEOUT_S, DbControl, DbTarget
from executor.kinds.errors import TransactionError
from executor.kinds.fs import FsWorkspace, PendingFs
from executor.kinds.sandbox import Mount, run_with_mounts, sandbox_host_uid
from executor.limits import Limits
from executor.result import RunResult
from executor.spec import RunSpec

logger = logging.getLogger(__name__)


class DbRun:
    """A running db-kind sandbox. The sandbox (and its transaction) ends with keep(), undo(),
    the driver's own timeout, or a failure of the code; `outcome` then says which."""

    def __init__(
        self,
        backend: Backend,
        spec: RunSpec,
        *,
        limits: Limits,
        target: DbTarget,
        control_base: Path,
        run_id: str,
        workspace: FsWorkspace | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        allow_private: bool = False,
        on_output: OutputCallback | None = None,
        cancel: CancelToken | None = None,
    ) -> None:
        if target.sqlite_path and workspace is None:
            raise TransactionError("a SQLite target needs the workspace that holds the file")
        self.control = DbControl(control_base, allow_private=allow_private)
        self.fs: PendingFs | None = None
        self.outcome = ""  # "committed", "rolled_back:<reason>" or "ended"
        self.result: RunResult | None = None
        self.error: BaseException | None = None
        try:
            driver, run_limits, mounts = self.control.prepare(
                spec, limits, target, timeout_s=timeout_s
            )
            if workspace is not None:
                self.fs = workspace.begin(run_id, uid=sandbox_host_uid(backend))
                mounts.append(Mount(self.fs.tree, "/workspace", writable=True))
        except BaseException:
            self.control.close()
            raise
        self._done = threading.Event()
        args = (backend, driver, run_limits, mounts, on_output, cancel)
        threading.Thread(target=self._run, args=args, name="undoable-db-run", daemon=True).start()

    def _run(self, backend, driver, limits, mounts, on_output, cancel) -> None:  # type: ignore[no-untyped-def]
        try:
            self.result = run_with_mounts(
                backend, driver, limits=limits, mounts=mounts, on_output=on_output, cancel=cancel
            )
        except BaseException as exc:  # re-raised to whoever waits on the run
            self.error = exc
        finally:
            self._done.set()

    def wait_pending(self, timeout_s: float = 60.0) -> dict:
        """The driver's first event: {"event": "pending"} when the code succeeded."""
        event = self.control.wait_event(timeout_s)
        if event is None:
            raise TransactionError("the database driver did not report within the time allowed")
        self._note(event)
        return event

    def keep(self, timeout_s: float = 60.0) -> RunResult:
        """Commit, let the sandbox end, then apply the workspace copy (SQLite)."""
        self.control.decide(commit=True)
        return self.wait(timeout_s)

    def undo(self, timeout_s: float = 60.0) -> RunResult:
        """Roll back, let the sandbox end, then discard the workspace copy."""
        self.control.decide(commit=False)
        return self.wait(timeout_s)

    def wait(self, timeout_s: float | None = None) -> RunResult:
        """Wait for the sandbox to end (e.g. the automatic rollback) and settle the workspace."""
        if not self._done.wait(timeout_s):
            raise TransactionError("the database sandbox did not end within the time allowed")
        # The driver's last word ("committed") is in flight until its socket closes.
        while self.control.connected and (event := self.control.wait_event(5.0)) is not None:
            self._note(event)
            if event.get("event") == "closed":
                break
        self.control.close()
        if self.fs is not None:
            if self.outcome == "committed" and self.result is not None and self.result.ok:
                self.fs.keep()
            else:
                self.fs.undo()
            self.fs = None
        if self.error is not None:
            raise self.error
        assert self.result is not None
        logger.info("db run ended", extra={"outcome": self.outcome})
        return self.result

    def _note(self, event: dict) -> None:
        if event.get("event") == "committed":
            self.outcome = "committed"
        elif event.get("event") == "rolled_back":
            self.outcome = f"rolled_back:{event.get('reason', '')}"
