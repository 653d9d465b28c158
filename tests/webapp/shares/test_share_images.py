"""A share that includes the last run's output shows that run's images, at the share's own
URLs, to anyone with the link while it is live; under the same headers as the owner's."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.factories import QueryFactory, RunFactory
from webapp.runs.images import IMAGE_CSP
from webapp.runs.models import RunImage, RunStatus
from webapp.shares.models import Share

pytestmark = pytest.mark.django_db

SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'


def shared(owner, *, include_output: bool) -> Share:
    query = QueryFactory(owner=owner)
    run = RunFactory(query=query, status=RunStatus.SUCCEEDED)
    RunImage.objects.create(run=run, position=1, name="plot.svg", mime="image/svg+xml", data=SVG)
    client = Client()
    client.force_login(owner)
    data = {"include_output": "on"} if include_output else {}
    assert client.post(reverse("shares:create", args=[query.pk]), data).status_code == 302
    return Share.objects.get(query=query)


def image_url(share: Share, position: int = 1) -> str:
    return reverse("shares:image", kwargs={"token": share.token, "position": position})


def test_a_share_with_output_shows_the_runs_images_to_anyone(owner) -> None:
    share = shared(owner, include_output=True)
    page = Client().get(reverse("shares:detail", args=[share.token])).content.decode()
    alt = f"Figure 1 from run #{share.output_run_id}: plot.svg"
    assert f'<img src="{image_url(share)}" alt="{alt}" loading="lazy">' in page
    response = Client().get(image_url(share))
    assert response.status_code == 200
    assert response.content == SVG
    assert response["Content-Type"] == "image/svg+xml"
    assert response["Content-Security-Policy"] == IMAGE_CSP
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Cache-Control"] == "private, no-store"


def test_deny_a_share_without_output_shows_no_image(owner) -> None:
    share = shared(owner, include_output=False)
    page = Client().get(reverse("shares:detail", args=[share.token])).content.decode()
    assert "<img" not in page
    assert Client().get(image_url(share)).status_code == 404


def test_deny_a_revoked_share_serves_no_image(owner) -> None:
    share = shared(owner, include_output=True)
    share.revoked_at = share.created_at
    share.save()
    assert Client().get(image_url(share)).status_code == 404


def test_a_share_keeps_showing_the_run_it_snapshotted(owner) -> None:
    share = shared(owner, include_output=True)
    later = RunFactory(query=share.query, status=RunStatus.SUCCEEDED)
    RunImage.objects.create(run=later, position=1, name="l.svg", mime="image/svg+xml", data=b"x")
    RunImage.objects.create(run=later, position=2, name="m.svg", mime="image/svg+xml", data=b"y")
    assert Client().get(image_url(share)).content == SVG
    assert Client().get(image_url(share, 2)).status_code == 404
