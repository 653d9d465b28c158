"""The job a run hands the executor, and where each query kind's comes from.

A python run's job is its spec and limits. The fs, db and rest kinds add mounts and settle
after the run (keep, roll back, undo): webapp.workspaces registers their job sources in its
AppConfig.ready(), since it builds on this app and this app cannot import it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager

from webapp.executor_glue import Limits, Mount, RunResult, RunSpec
from webapp.queries.models import QueryKind
from webapp.runs.models import Run


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


JobSource = Callable[[Run, RunSpec, Limits], AbstractContextManager[KindJob]]
_sources: dict[str, JobSource] = {}


class NoJobSource(RuntimeError):
    """A kind whose job nobody registered: the run fails rather than run without its kind."""


def job_source_add(kind: str, source: JobSource) -> None:
    _sources[kind] = source


@contextlib.contextmanager
def run_job_for(run: Run, spec: RunSpec, limits: Limits) -> Iterator[KindJob]:
    kind = run.query.kind
    if kind == QueryKind.PYTHON:
        yield KindJob(spec, limits)
        return
    source = _sources.get(kind)
    if source is None:
        raise NoJobSource(f"no job source for {kind} runs (is webapp.workspaces installed?)")
    with source(run, spec, limits) as job:
        yield job
