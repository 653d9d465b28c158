"""Each query kind's run gets its job from the source its app registered; a kind nobody
registered fails instead of running as plain python without its workspace or its undo."""

from __future__ import annotations

import pytest

from executor import Limits, RunSpec
from tests.factories import QueryFactory, RunFactory
from webapp.runs import jobs
from webapp.workspaces.db_runs import db_job
from webapp.workspaces.runs import fs_job, rest_job

pytestmark = pytest.mark.django_db


def test_the_workspaces_app_registers_the_fs_db_and_rest_jobs() -> None:
    assert jobs._sources == {"fs": fs_job, "db": db_job, "rest": rest_job}


def test_a_python_run_gets_a_plain_job() -> None:
    run = RunFactory(query=QueryFactory(kind="python"))
    with jobs.run_job_for(run, RunSpec(code="print(1)"), Limits()) as job:
        assert (job.spec.code, job.mounts) == ("print(1)", ())


def test_a_kind_without_a_job_source_fails_rather_than_run_plain(monkeypatch) -> None:
    monkeypatch.setattr(jobs, "_sources", {})
    run = RunFactory(query=QueryFactory(kind="fs"))
    job = jobs.run_job_for(run, RunSpec(code="print(1)"), Limits())
    with pytest.raises(jobs.NoJobSource, match="no job source for fs runs"), job:
        pass
