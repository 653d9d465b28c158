"""Runs through the embedded thread runner on the real bwrap sandbox."""

from __future__ import annotations

import pytest

from tests.factories import QueryFactory
from tests.webapp.runs.waiting import wait_until
from webapp.runs import runner, services
from webapp.runs.models import Run, RunChunk, RunDirection, RunStatus

pytestmark = pytest.mark.usefixtures("threads_runner")

SECRET = "s3cr3t-canary-5150"


def finished(run: Run, timeout: float = 30.0) -> Run:
    assert runner.wait(run.pk, timeout), f"run {run.pk} did not finish"
    run.refresh_from_db()
    return run


def chunks(run: Run) -> list[RunChunk]:
    return list(RunChunk.objects.filter(run=run).order_by("seq"))


def test_it_streams_numbered_output_and_records_success() -> None:
    query = QueryFactory(
        forward_code="import sys\nprint('one')\nprint('oops', file=sys.stderr)\nprint('two')\n"
    )
    run = finished(services.query_run(query=query))
    stored = chunks(run)
    assert run.status == RunStatus.SUCCEEDED
    assert run.exit_code == 0
    assert run.duration_ms is not None
    assert [c.seq for c in stored] == list(range(1, len(stored) + 1))
    assert "".join(c.text for c in stored if c.stream == "stdout") == "one\ntwo\n"
    assert "".join(c.text for c in stored if c.stream == "stderr") == "oops\n"


def test_it_records_a_failing_program_with_its_exit_code() -> None:
    query = QueryFactory(forward_code="print('about to fail')\nraise SystemExit(3)\n")
    run = finished(services.query_run(query=query))
    assert (run.status, run.exit_code) == (RunStatus.FAILED, 3)


def test_it_runs_the_reverse_code_when_asked() -> None:
    query = QueryFactory(forward_code="print('forward')\n", reverse_code="print('reverse')\n")
    run = finished(services.query_run(query=query, direction=RunDirection.REVERSE))
    assert run.code == "print('reverse')\n"
    assert "".join(c.text for c in chunks(run)) == "reverse\n"


def test_it_stops_a_running_program_when_cancelled() -> None:
    query = QueryFactory(forward_code="import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    run = services.query_run(query=query)
    wait_until(lambda: RunChunk.objects.filter(run=run).exists(), what="first output")
    services.run_cancel(run=run)
    run = finished(run, timeout=15)
    assert run.status == RunStatus.CANCELLED
    assert run.cancel_requested


def test_it_cancels_a_queued_run_before_it_starts() -> None:
    run = services.run_create(query=QueryFactory())
    services.run_cancel(run=run)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert not RunChunk.objects.filter(run=run).exists()


def test_deny_a_run_missing_a_credential_is_not_created() -> None:
    query = QueryFactory(
        forward_code="print('should never print')\n", credential_names=["SLACK_TOKEN"]
    )
    with pytest.raises(services.CredentialsMissing) as refused:
        services.query_run(query=query, credentials={"OTHER": "x", "SLACK_TOKEN": ""})
    assert refused.value.names == ["SLACK_TOKEN"]
    assert "Missing credential: SLACK_TOKEN." in str(refused.value)
    assert not Run.objects.filter(query=query).exists()


@pytest.mark.sabotage
def test_sabotage_without_the_credential_check_a_run_is_created_and_fails(monkeypatch) -> None:
    # Only query_run's check is switched off; run_start's own (for its direct callers) stays.
    checks = [lambda **kwargs: [], services.credentials_missing]
    monkeypatch.setattr(services, "credentials_missing", lambda **kw: checks.pop(0)(**kw))
    query = QueryFactory(
        forward_code="print('should never print')\n", credential_names=["SLACK_TOKEN"]
    )
    run = services.query_run(query=query, credentials={})
    assert Run.objects.filter(query=query).exists()
    assert run.status == RunStatus.FAILED


def test_it_passes_credentials_to_the_sandbox_and_masks_them_in_stored_output() -> None:
    query = QueryFactory(
        forward_code="import os\nprint('token is', os.environ['API_TOKEN'])\n",
        credential_names=["API_TOKEN"],
    )
    run = finished(
        services.query_run(query=query, credentials={"API_TOKEN": SECRET, "OTHER": "unused"})
    )
    text = "".join(c.text for c in chunks(run))
    assert run.status == RunStatus.SUCCEEDED
    assert text == "token is ****\n"


def test_it_caps_the_output_of_a_run() -> None:
    query = QueryFactory(forward_code="while True:\n    print('x' * 100)\n")
    run = services.run_create(query=query)
    Run.objects.filter(pk=run.pk).update(output_cap_bytes=2048)
    run.refresh_from_db()
    run = finished(services.run_start(run=run, credentials={}))
    program_bytes = sum(len(c.text.encode()) for c in chunks(run) if c.stream != "system")
    assert run.truncated
    assert program_bytes <= 2048
    assert run.output_bytes == program_bytes
