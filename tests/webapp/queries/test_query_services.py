"""Query services with the fake LLM server (real HTTP) and, for Fix, a real sandboxed run."""

from __future__ import annotations

import json

import pytest

from tests.factories import QueryFactory, UserFactory
from tests.fakes.llm_server import error, tool_call
from webapp import llm
from webapp.queries import services
from webapp.queries.models import Query
from webapp.runs import runner
from webapp.runs import services as run_services
from webapp.runs.models import RunStatus

PROPOSAL = {
    "forward_code": "print('hi')",
    "reverse_code": "print('bye')",
    "explanation": "Says hi.",
    "credentials": [],
    "hosts": [],
    "reversible": False,
}
SECRET = "xoxb-never-to-the-model-8812"


@pytest.mark.django_db
def test_it_creates_a_query_with_the_generated_code(fake_llm) -> None:
    fake_llm.script(tool_call(PROPOSAL))
    query = services.query_create(owner=UserFactory(), prompt="  say hi  ")
    assert query.prompt == "say hi"
    assert query.forward_code == query.generated_forward_code == "print('hi')\n"
    assert query.reverse_code == query.generated_reverse_code == "print('bye')\n"
    assert query.reversible is False


@pytest.mark.django_db
def test_it_saves_nothing_when_generation_fails(fake_llm) -> None:
    fake_llm.script(error(500))
    with pytest.raises(llm.LLMUnavailable):
        services.query_create(owner=UserFactory(), prompt="say hi")
    assert not Query.objects.exists()


@pytest.mark.django_db
def test_it_keeps_the_edited_code_when_regeneration_fails(fake_llm) -> None:
    query = QueryFactory(forward_code="print('my edit')\n")
    fake_llm.script(error(503))
    with pytest.raises(llm.LLMUnavailable):
        services.query_generate(query=query)
    query.refresh_from_db()
    assert query.forward_code == "print('my edit')\n"
    assert "HTTP 503" in query.generation_error


@pytest.mark.django_db
def test_it_saves_only_the_fields_given() -> None:
    query = QueryFactory(forward_code="a = 1\n", reverse_code="b = 2\n")
    services.query_update(query=query, forward_code="a = 3\n")
    query.refresh_from_db()
    assert (query.forward_code, query.reverse_code) == ("a = 3\n", "b = 2\n")


@pytest.mark.usefixtures("threads_runner")
def test_a_fix_request_carries_the_masked_error_and_never_a_credential_value(fake_llm) -> None:
    query = QueryFactory(
        forward_code="import os\nprint(os.environ['SLACK_TOKEN'])\nraise ValueError('boom')\n",
        credential_names=["SLACK_TOKEN"],
    )
    run = run_services.query_run(query=query, credentials={"SLACK_TOKEN": SECRET})
    assert runner.wait(run.pk, 30)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    fake_llm.script(tool_call({"code": "print('fixed')", "explanation": "No error now."}))
    fix = run_services.run_propose_fix(run=run)
    sent = json.dumps(fake_llm.requests)
    assert fix.code == "print('fixed')\n"
    assert "ValueError: boom" in sent
    assert "****" in sent
    assert SECRET not in sent
