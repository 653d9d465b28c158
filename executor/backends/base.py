"""The interface every sandbox backend implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from executor.cancel import CancelToken
from executor.limits import Limits
from executor.policy.mounts import Mount
from executor.result import OutputCallback, RunResult
from executor.spec import RunSpec


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

    def close(self) -> None:
        """Stop warm pools and remove everything this backend started."""
