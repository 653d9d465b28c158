"""Share links: an immutable snapshot anyone with the link can read; revoke; fork."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.factories import QueryFactory, RunChunkFactory, RunFactory
from tests.webapp.shares.factories import ShareFactory
from webapp.queries.models import Query
from webapp.runs.models import RunStatus
from webapp.shares.models import Share

pytestmark = pytest.mark.django_db


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def create_share(owner, query, *, include_output: bool) -> Share:
    data = {"include_output": "on"} if include_output else {}
    response = signed_in(owner).post(reverse("shares:create", args=[query.pk]), data)
    assert response.status_code == 302
    return Share.objects.get(query=query)


def test_it_snapshots_prompt_and_both_codes_without_output_by_default(owner) -> None:
    query = QueryFactory(owner=owner, forward_code="print('fwd')", reverse_code="print('rev')")
    RunChunkFactory(run=RunFactory(query=query), text="the output\n")
    share = create_share(owner, query, include_output=False)
    page = Client().get(reverse("shares:detail", args=[share.token]))
    assert page.status_code == 200
    body = page.content.decode()
    assert query.prompt in body
    assert "print(&#x27;fwd&#x27;)" in body
    assert "print(&#x27;rev&#x27;)" in body
    assert "the output" not in body
    assert share.output == ""


def test_it_includes_the_last_runs_output_only_when_ticked(owner) -> None:
    query = QueryFactory(owner=owner)
    RunChunkFactory(run=RunFactory(query=query), text="older run\n")
    last = RunFactory(query=query, status=RunStatus.FAILED)
    RunChunkFactory(run=last, seq=1, text="token=**** ")
    RunChunkFactory(run=last, seq=2, text="sent\n")
    share = create_share(owner, query, include_output=True)
    body = Client().get(reverse("shares:detail", args=[share.token])).content.decode()
    assert "token=**** sent" in body
    assert "older run" not in body
    assert share.output_status == "failed"


def test_a_snapshot_does_not_change_when_the_query_is_edited(owner) -> None:
    query = QueryFactory(owner=owner, forward_code="print(1)")
    share = create_share(owner, query, include_output=False)
    Query.objects.filter(pk=query.pk).update(forward_code="print(2)", prompt="changed")
    body = Client().get(reverse("shares:detail", args=[share.token])).content.decode()
    assert "print(1)" in body
    assert "print(2)" not in body


def test_share_tokens_are_long_and_random(owner) -> None:
    query = QueryFactory(owner=owner)
    tokens = {create_share(owner, query, include_output=False).token}
    Share.objects.all().delete()
    tokens |= {ShareFactory(query=query).token for _ in range(20)}
    assert len(tokens) == 21
    assert min(len(t) for t in tokens) >= 43


def test_the_share_page_keeps_its_link_out_of_referers_and_caches(owner) -> None:
    share = ShareFactory(query=QueryFactory(owner=owner))
    page = Client().get(reverse("shares:detail", args=[share.token]))
    assert page["Referrer-Policy"] == "same-origin"
    assert "no-store" in page["Cache-Control"]


def test_it_rejects_a_stranger_sharing_someone_elses_query(owner, stranger) -> None:
    query = QueryFactory(owner=owner)
    response = signed_in(stranger).post(reverse("shares:create", args=[query.pk]))
    assert response.status_code == 404
    assert not Share.objects.exists()


def test_a_revoked_link_answers_404(owner) -> None:
    share = ShareFactory(query=QueryFactory(owner=owner))
    response = signed_in(owner).post(reverse("shares:revoke", args=[share.token]))
    assert response.status_code == 302
    assert Client().get(reverse("shares:detail", args=[share.token])).status_code == 404
    assert signed_in(owner).get(reverse("shares:detail", args=[share.token])).status_code == 404


def test_it_rejects_a_stranger_revoking_a_link(owner, stranger) -> None:
    share = ShareFactory(query=QueryFactory(owner=owner))
    response = signed_in(stranger).post(reverse("shares:revoke", args=[share.token]))
    assert response.status_code == 404
    assert Client().get(reverse("shares:detail", args=[share.token])).status_code == 200


def test_a_signed_in_visitor_forks_code_but_no_runs(owner, stranger) -> None:
    query = QueryFactory(
        owner=owner, credential_names=["SLACK_TOKEN"], hosts=["slack.com"], kind="rest"
    )
    RunChunkFactory(run=RunFactory(query=query))
    share = ShareFactory(query=query, credential_names=["SLACK_TOKEN"], hosts=["slack.com"])
    response = signed_in(stranger).post(reverse("shares:fork", args=[share.token]))
    fork = Query.objects.get(owner=stranger)
    assert response.status_code == 302
    assert response["Location"] == reverse("queries:query-detail", args=[fork.pk])
    assert (fork.prompt, fork.forward_code, fork.reverse_code) == (
        query.prompt,
        query.forward_code,
        query.reverse_code,
    )
    assert fork.credential_names == ["SLACK_TOKEN"]
    assert fork.hosts == ["slack.com"]
    assert fork.runs.count() == 0


def test_forking_a_revoked_link_answers_404(owner, stranger) -> None:
    share = ShareFactory(query=QueryFactory(owner=owner))
    signed_in(owner).post(reverse("shares:revoke", args=[share.token]))
    assert signed_in(stranger).post(reverse("shares:fork", args=[share.token])).status_code == 404
    assert Client().post(reverse("shares:fork", args=[share.token])).status_code == 404
    assert not Query.objects.filter(owner=stranger).exists()


def test_an_anonymous_visitor_is_asked_to_sign_in_to_fork(owner) -> None:
    share = ShareFactory(query=QueryFactory(owner=owner))
    response = Client().post(reverse("shares:fork", args=[share.token]))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("accounts:login"))
    assert Query.objects.count() == 1


def test_the_owner_lists_only_their_live_links(owner, stranger) -> None:
    mine = ShareFactory(query=QueryFactory(owner=owner, prompt="mine to list"))
    revoked = ShareFactory(query=QueryFactory(owner=owner, prompt="revoked one"))
    signed_in(owner).post(reverse("shares:revoke", args=[revoked.token]))
    ShareFactory(query=QueryFactory(owner=stranger, prompt="not mine"))
    body = signed_in(owner).get(reverse("shares:list")).content.decode()
    assert mine.token in body
    assert "revoked one" not in body
    assert "not mine" not in body


def test_deleting_the_query_takes_its_links_down(owner) -> None:
    share = ShareFactory(query=QueryFactory(owner=owner))
    share.query.delete()
    assert Client().get(reverse("shares:detail", args=[share.token])).status_code == 404
