"""The job a query kind hands the runner, and the settings every kind reads."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django.conf import settings

from executor import Limits, Mount, RunResult, RunSpec


class KindJob:
    """What the runner starts (spec, limits, mounts) and how the kind settles afterwards."""

    def __init__(
        self,
        spec: RunSpec,
        limits: Limits,
        mounts: Sequence[Mount] = (),
        settle: Callable[[RunResult], None] | None = None,
    ) -> None:
        self.spec, self.limits, self.mounts = spec, limits, tuple(mounts)
        self._settle = settle
        self.finished = False

    def finish(self, result: RunResult) -> None:
        self.finished = True
        if self._settle is not None:
            self._settle(result)


def allow_private() -> bool:
    return bool(settings.EXECUTOR_EGRESS_ALLOW_PRIVATE)
