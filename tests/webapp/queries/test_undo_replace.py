"""Propose again keeps the code it replaces; Undo replace puts it back (services and views)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import QueryFactory
from tests.fakes.llm_server import error, tool_call
from webapp import llm
from webapp.queries import services
from webapp.queries.models import QueryVersion

PROPOSAL = {
    "forward_code": "print('second proposal')\n",
    "reverse_code": "print('second undo')\n",
    "explanation": "The second try.",
    "credentials": [],
    "hosts": [],
    "reversible": False,
}


def edited_query(owner):
    return QueryFactory(
        owner=owner,
        forward_code="print('my edit')\n",
        reverse_code="print('my undo edit')\n",
        generated_forward_code="print('first proposal')\n",
        generated_reverse_code="print('first undo')\n",
        explanation="The first try.",
        reversible=True,
    )


def test_propose_again_keeps_the_edited_code_as_a_version(owner, fake_llm) -> None:
    query = edited_query(owner)
    fake_llm.script(tool_call(PROPOSAL))

    services.query_generate(query=query)

    query.refresh_from_db()
    assert query.forward_code == "print('second proposal')\n"
    kept = query.versions.get()
    assert (kept.forward_code, kept.reverse_code) == (
        "print('my edit')\n",
        "print('my undo edit')\n",
    )
    assert kept.generated_forward_code == "print('first proposal')\n"
    assert (kept.explanation, kept.reversible) == ("The first try.", True)


def test_a_failed_proposal_keeps_no_version_and_leaves_the_code(owner, fake_llm) -> None:
    query = edited_query(owner)
    fake_llm.script(error(500))

    with pytest.raises(llm.LLMError):
        services.query_generate(query=query)

    query.refresh_from_db()
    assert query.forward_code == "print('my edit')\n"
    assert not query.versions.exists()


def test_two_empty_editors_are_not_kept(owner, fake_llm) -> None:
    query = QueryFactory(owner=owner, forward_code="", reverse_code="")
    fake_llm.script(tool_call(PROPOSAL))

    services.query_generate(query=query)

    assert not query.versions.exists()


def test_only_the_latest_versions_are_kept(owner, fake_llm) -> None:
    query = edited_query(owner)
    for n in range(services.VERSIONS_KEPT + 2):
        fake_llm.script(tool_call({**PROPOSAL, "forward_code": f"print({n})"}))
        services.query_generate(query=query)

    assert query.versions.count() == services.VERSIONS_KEPT
    assert query.versions.first().forward_code == f"print({services.VERSIONS_KEPT})\n"


def test_undo_replace_restores_the_code_and_what_came_with_it(owner, fake_llm) -> None:
    query = edited_query(owner)
    fake_llm.script(tool_call(PROPOSAL))
    services.query_generate(query=query)

    restored = services.query_undo_replace(query=query)

    assert restored is not None
    query.refresh_from_db()
    assert (query.forward_code, query.reverse_code) == (
        "print('my edit')\n",
        "print('my undo edit')\n",
    )
    assert query.generated_forward_code == "print('first proposal')\n"
    assert (query.explanation, query.reversible) == ("The first try.", True)
    assert not query.versions.exists()


def test_undo_replace_steps_back_one_proposal_at_a_time(owner, fake_llm) -> None:
    query = edited_query(owner)
    fake_llm.script(tool_call(PROPOSAL), tool_call({**PROPOSAL, "forward_code": "print(3)\n"}))
    services.query_generate(query=query)
    services.query_generate(query=query)

    services.query_undo_replace(query=query)
    query.refresh_from_db()
    assert query.forward_code == "print('second proposal')\n"
    services.query_undo_replace(query=query)
    query.refresh_from_db()
    assert query.forward_code == "print('my edit')\n"


def test_undo_replace_with_nothing_kept_changes_nothing(owner) -> None:
    query = edited_query(owner)

    assert services.query_undo_replace(query=query) is None
    query.refresh_from_db()
    assert query.forward_code == "print('my edit')\n"


def test_the_page_offers_undo_replace_after_propose_again(owner_client, owner, fake_llm) -> None:
    query = edited_query(owner)
    detail = reverse("queries:query-detail", args=[query.pk])
    assert 'data-testid="undo-replace"' not in owner_client.get(detail).content.decode()
    fake_llm.script(tool_call(PROPOSAL))

    owner_client.post(reverse("queries:query-regenerate", args=[query.pk]))
    page = owner_client.get(detail).content.decode()

    assert "Replaced by a new proposal." in page
    assert reverse("queries:query-undo-replace", args=[query.pk]) in page


def test_the_undo_replace_view_restores_and_returns_to_the_page(
    owner_client, owner, fake_llm
) -> None:
    query = edited_query(owner)
    fake_llm.script(tool_call(PROPOSAL))
    owner_client.post(reverse("queries:query-regenerate", args=[query.pk]))

    response = owner_client.post(reverse("queries:query-undo-replace", args=[query.pk]))

    assert response["Location"] == reverse("queries:query-detail", args=[query.pk])
    query.refresh_from_db()
    assert query.forward_code == "print('my edit')\n"
    page = owner_client.get(response["Location"]).content.decode()
    assert "The code the proposal replaced is back in the editors." in page
    assert "Replaced by a new proposal." not in page


def test_a_stranger_cannot_undo_a_replace(stranger_client, owner, fake_llm) -> None:
    query = edited_query(owner)
    fake_llm.script(tool_call(PROPOSAL))
    services.query_generate(query=query)

    response = stranger_client.post(reverse("queries:query-undo-replace", args=[query.pk]))

    assert response.status_code == 404
    query.refresh_from_db()
    assert query.forward_code == "print('second proposal')\n"
    assert QueryVersion.objects.filter(query=query).count() == 1


def test_undo_replace_only_answers_post(owner_client, owner) -> None:
    query = edited_query(owner)

    response = owner_client.get(reverse("queries:query-undo-replace", args=[query.pk]))

    assert response.status_code == 405
