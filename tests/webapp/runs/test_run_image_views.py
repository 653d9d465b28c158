"""A web run's images: stored with its result on the real bwrap sandbox, listed in its final
status, served to its owner only, with headers under which an SVG's script never runs."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import QueryFactory
from webapp.runs import runner, services
from webapp.runs.images import IMAGE_CSP
from webapp.runs.models import Run, RunChunk, RunImage, RunStatus
from webapp.runs.status import status_payload

pytestmark = pytest.mark.usefixtures("threads_runner")

PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.title('rising')\n"
SCRIPTED_SVG = (
    "import os\n"
    "out = os.environ['UNDOABLE_OUTPUT_DIR']\n"
    "os.makedirs(out, exist_ok=True)\n"
    "open(f'{out}/boom.svg', 'w').write("
    "'<svg xmlns=\"http://www.w3.org/2000/svg\"><script>alert(document.cookie)</script></svg>')\n"
    "open(f'{out}/notes.svg', 'w').write('<html>not an image</html>')\n"
)


def finished(run: Run) -> Run:
    assert runner.wait(run.pk, 60), f"run {run.pk} did not finish"
    run.refresh_from_db()
    return run


def test_an_open_figure_is_stored_listed_and_served_to_its_owner(owner, owner_client) -> None:
    run = finished(services.query_run(query=QueryFactory(owner=owner, forward_code=PLOT)))
    assert run.status == RunStatus.SUCCEEDED
    images = status_payload(run)["images"]
    assert images == [
        {"url": f"/runs/{run.pk}/images/1", "name": "figure-1.png", "mime": "image/png"}
    ]
    response = owner_client.get(images[0]["url"])
    assert response.status_code == 200
    assert response["Content-Type"] == "image/png"
    assert response.content.startswith(b"\x89PNG")
    assert response["Content-Disposition"] == "inline"


def test_deny_an_svg_with_a_script_is_served_sandboxed_and_never_sniffed(
    owner, owner_client
) -> None:
    run = finished(services.query_run(query=QueryFactory(owner=owner, forward_code=SCRIPTED_SVG)))
    response = owner_client.get(f"/runs/{run.pk}/images/1")
    assert response.status_code == 200
    assert response["Content-Type"] == "image/svg+xml"
    assert b"<script>" in response.content  # stored as made: the headers are what disarm it
    assert response["Content-Security-Policy"] == IMAGE_CSP
    assert response["Content-Security-Policy"].split(";")[0] == "sandbox"
    assert response["X-Content-Type-Options"] == "nosniff"


def test_the_person_reads_why_an_image_was_left_out(owner) -> None:
    run = finished(services.query_run(query=QueryFactory(owner=owner, forward_code=SCRIPTED_SVG)))
    assert list(RunImage.objects.filter(run=run).values_list("name", flat=True)) == ["boom.svg"]
    system = [c.text for c in RunChunk.objects.filter(run=run, stream="system")]
    assert system == ["image_type: left out notes.svg: not a PNG, JPEG, GIF or SVG image\n"]


def test_deny_another_persons_run_image_is_a_404(owner, stranger_client) -> None:
    run = finished(services.query_run(query=QueryFactory(owner=owner, forward_code=PLOT)))
    assert stranger_client.get(f"/runs/{run.pk}/images/1").status_code == 404
    anonymous = Client().get(f"/runs/{run.pk}/images/1")
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith("/accounts/login")


def test_an_image_past_the_runs_last_is_a_404(owner, owner_client) -> None:
    run = finished(services.query_run(query=QueryFactory(owner=owner, forward_code=PLOT)))
    assert owner_client.get(f"/runs/{run.pk}/images/2").status_code == 404
    assert owner_client.get(f"/runs/{run.pk}/images/0").status_code == 404
