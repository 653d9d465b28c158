"""The Fix button's server side: the fix replaces the failed run's code in the query, and the code
it replaced is kept, so the page shows the fix's diff after a reload. Only the owner can ask."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import QueryFactory, RunFactory
from tests.fakes.llm_server import error, tool_call
from webapp.queries import services as query_services
from webapp.runs import services
from webapp.runs.models import RunDirection, RunStatus

FAILED = "raise ValueError('boom')\n"
FIXED = "print('no boom')\n"


def failed_run(owner, direction: str = RunDirection.FORWARD):
    query = QueryFactory(owner=owner, forward_code=FAILED, reverse_code=FAILED)
    return RunFactory(query=query, direction=direction, status=RunStatus.FAILED, error="boom")


@pytest.mark.parametrize("side", ["forward", "reverse"])
def test_a_fix_replaces_the_code_and_the_page_keeps_the_version_it_replaced(
    owner_client, owner, fake_llm, side
) -> None:
    run = failed_run(owner, direction=side)
    fake_llm.script(tool_call({"code": FIXED, "explanation": "No exception now."}))
    response = owner_client.post(reverse("runs:run-fix", args=[run.pk]))
    assert response.json() == {
        "code": FIXED,
        "explanation": "No exception now.",
        "previous": FAILED,
    }
    run.query.refresh_from_db()
    assert getattr(run.query, f"{side}_code") == FIXED
    assert getattr(run.query, f"{side}_code_before_fix") == FAILED

    page = owner_client.get(reverse("queries:query-detail", args=[run.query.pk])).content.decode()
    assert (
        f'<script id="{side}-code-before-fix" type="application/json">'
        "\"raise ValueError('boom')\\n\"</script>"
    ) in page


@pytest.mark.django_db
def test_a_failed_fix_request_changes_nothing(fake_llm) -> None:
    run = failed_run(QueryFactory().owner)
    fake_llm.script(error(500))
    with pytest.raises(services.llm.LLMError):
        services.run_apply_fix(run=run)
    run.query.refresh_from_db()
    assert (run.query.forward_code, run.query.forward_code_before_fix) == (FAILED, "")


def test_a_stranger_can_neither_fix_nor_read_the_previous_version(
    stranger_client, owner, fake_llm
) -> None:
    run = failed_run(owner)
    query_services.query_update(query=run.query, forward_code=FIXED)
    run.query.forward_code_before_fix = "SECRET_PREVIOUS_VERSION = 1\n"
    run.query.save()
    fake_llm.script(tool_call({"code": "print('stranger fix')", "explanation": ""}))
    assert stranger_client.post(reverse("runs:run-fix", args=[run.pk])).status_code == 404
    detail = stranger_client.get(reverse("queries:query-detail", args=[run.query.pk]))
    assert detail.status_code == 404
    assert "SECRET_PREVIOUS_VERSION" not in detail.content.decode()
    assert fake_llm.requests == []
    run.query.refresh_from_db()
    assert (run.query.forward_code, run.query.forward_code_before_fix) == (
        FIXED,
        "SECRET_PREVIOUS_VERSION = 1\n",
    )


@pytest.mark.django_db
def test_a_new_proposal_drops_the_fix_it_replaces(fake_llm) -> None:
    query = QueryFactory(forward_code=FIXED, forward_code_before_fix=FAILED)
    fake_llm.script(
        tool_call({"forward_code": "print(1)", "reverse_code": "print(2)", "explanation": ""})
    )
    query_services.query_generate(query=query)
    query.refresh_from_db()
    assert (query.forward_code, query.forward_code_before_fix) == ("print(1)\n", "")
