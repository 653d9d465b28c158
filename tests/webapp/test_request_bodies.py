"""The cap webapp.server.request_bodies holds each route's request body to, from the request
head."""

from __future__ import annotations

import pytest
from django.conf import settings

from webapp.server.request_bodies import route_body_cap
from webapp.workspaces.uploads import MAX_UPLOAD_BYTES, MAX_UPLOAD_REQUEST_BYTES


@pytest.mark.parametrize(
    ("method", "path", "cap"),
    [
        ("POST", "/api/v1/exec", "AGENTS_MAX_BODY_BYTES"),
        ("POST", "/api/v1/sessions/s1/exec", "AGENTS_MAX_BODY_BYTES"),
        ("PUT", "/api/v1/sessions/s1/files/a/b.txt", "AGENTS_SESSION_MAX_FILE_BYTES"),
        ("POST", "/api/v1/sessions/s1/files/a.txt", "AGENTS_MAX_BODY_BYTES"),
        ("PUT", "/api/v1/sessions//files/a.txt", "AGENTS_MAX_BODY_BYTES"),
        ("POST", "/queries/1/save", "DATA_UPLOAD_MAX_MEMORY_SIZE"),
        ("POST", "/accounts/login/", "DATA_UPLOAD_MAX_MEMORY_SIZE"),
        ("POST", "/no/such/page", "DATA_UPLOAD_MAX_MEMORY_SIZE"),
        ("POST", "/mcp", "AGENTS_MAX_BODY_BYTES"),
    ],
)
def test_each_route_has_the_cap_of_what_it_takes(method, path, cap):
    assert route_body_cap({"method": method, "path": path}) == getattr(settings, cap)


def test_a_workspace_upload_takes_its_files_and_the_form_and_no_more():
    scope = {"method": "POST", "path": "/workspaces/queries/7/upload"}
    assert route_body_cap(scope) == MAX_UPLOAD_REQUEST_BYTES


@pytest.mark.parametrize(
    ("method", "path", "cap"),
    [
        ("PUT", "/api/v1/workspaces/7/files/a/b.txt", MAX_UPLOAD_BYTES),
        ("POST", "/api/v1/workspaces/7/zip", MAX_UPLOAD_BYTES),
        ("POST", "/api/v1/workspaces", settings.AGENTS_MAX_BODY_BYTES),
        ("PUT", "/api/v1/workspaces//files/a.txt", settings.AGENTS_MAX_BODY_BYTES),
        ("POST", "/api/v1/workspaces/7/files/a.txt", settings.AGENTS_MAX_BODY_BYTES),
    ],
)
def test_a_workspace_file_or_zip_through_the_api_takes_the_uploads_cap(method, path, cap):
    assert route_body_cap({"method": method, "path": path}) == cap
