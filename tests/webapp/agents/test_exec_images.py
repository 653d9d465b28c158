"""The stateless and session APIs return a run's images as base64 with a MIME type, like
Jupyter's display_data, and name in a line each cap that left one out."""

from __future__ import annotations

import base64

import pytest

pytestmark = pytest.mark.django_db

PLOT = "import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5])\n"


def test_exec_returns_a_matplotlib_figure_as_base64_png(owner):
    response = owner.post("/api/v1/exec", {"code": PLOT}, accept="application/json")
    body = response.json()
    assert response.status_code == 200, body
    assert [(i["name"], i["mime"]) for i in body["images"]] == [("figure-1.png", "image/png")]
    assert base64.b64decode(body["images"][0]["data"]).startswith(b"\x89PNG\r\n\x1a\n")
    assert body["image_notes"] == []


def test_exec_names_what_it_left_out(owner):
    code = "import os\nos.mkdir('output')\nos.symlink('/etc/passwd', 'output/out.png')"
    body = owner.post("/api/v1/exec", {"code": code}, accept="application/json").json()
    assert body["images"] == []
    assert body["image_notes"] == [
        "image_file: left out out.png: not a regular file "
        "(symlinks, folders and FIFOs are never read)"
    ]


@pytest.mark.usefixtures("sessions")
def test_a_session_cell_returns_the_figures_it_left_open(owner):
    sid = owner.post("/api/v1/sessions", {}).json()["id"]
    body = owner.post(f"/api/v1/sessions/{sid}/exec", {"code": PLOT}).json()
    assert [(i["name"], i["mime"]) for i in body["images"]] == [("figure-1.png", "image/png")]
    assert owner.post(f"/api/v1/sessions/{sid}/exec", {"code": "1"}).json()["images"] == []
