"""Every page call that reads a JSON body reads it like the agent API does (webapp.json_body): a
body it cannot use is a 400, or a 413 when too large, with a message in the page's error shape;
never a 500, and nothing changes."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import QueryFactory
from tests.webapp.connections.oauth_setup import generic_provider
from webapp.runs.models import Run

MAX_BYTES = 16 * 1024  # above the hostile bodies below, which must fail for what they are
# The page calls with a JSON body: the query page's Save and Run.
PAGE_CALLS = pytest.mark.parametrize("url_name", ["queries:query-save", "runs:run-create"])
BODIES = pytest.mark.parametrize(
    ("raw", "status", "message"),
    [
        pytest.param(
            b'{"forward_code": ' + b"[" * 5000 + b"]" * 5000 + b"}",
            400,
            "request body is nested too deeply",
            id="deep-nesting",
        ),
        pytest.param(
            b'{"forward_code": ' + b"7" * 5000 + b"}",
            400,
            "request body has a number longer than 4300 digits",
            id="5000-digit-int",
        ),
        pytest.param(
            b'{"forward_code": "\xff\xfe"}',
            400,
            "request body is not valid UTF-8",
            id="invalid-utf8",
        ),
        pytest.param(b"[1, 2]", 400, "request body must be a JSON object", id="non-object"),
        pytest.param(b'"print(1)"', 400, "request body must be a JSON object", id="string"),
        pytest.param(b"{not json", 400, "request body is not valid JSON", id="malformed"),
        pytest.param(
            b'{"forward_code": "' + b"#" * MAX_BYTES + b'"}',
            413,
            "request body is too large",
            id="too-large",
        ),
    ],
)


@pytest.fixture(autouse=True)
def small_body_cap(settings) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_BYTES


@PAGE_CALLS
@BODIES
def test_a_body_the_page_cannot_use_is_a_clear_error_and_changes_nothing(
    owner_client, owner, url_name, raw, status, message
) -> None:
    query = QueryFactory(owner=owner, forward_code="print('kept')\n")

    response = owner_client.post(
        reverse(url_name, args=[query.pk]), data=raw, content_type="application/json"
    )

    assert response.status_code == status
    assert response.json()["error"].startswith(f"Invalid request: {message}")
    query.refresh_from_db()
    assert query.forward_code == "print('kept')\n"
    assert not Run.objects.exists()


@PAGE_CALLS
def test_a_body_of_the_wrong_shape_is_a_400_from_its_model(owner_client, owner, url_name) -> None:
    query = QueryFactory(owner=owner, forward_code="print('kept')\n")

    response = owner_client.post(
        reverse(url_name, args=[query.pk]),
        data={"forward_code": ["not", "a", "string"]},
        content_type="application/json",
    )

    assert response.status_code == 400
    assert response.json() == {"error": "Invalid request: Input should be a valid string"}


# The Connections panel's calls (webapp/connections/views.py) read their bodies the same way.
CONNECTION_CALLS = pytest.mark.parametrize("step", ["begin", "token", "refresh", "revoke"])


@CONNECTION_CALLS
@BODIES
def test_a_connection_call_answers_a_body_it_cannot_use_the_same_way(
    owner_client, step, raw, status, message
) -> None:
    with generic_provider():
        response = owner_client.post(
            f"/connections/generic/{step}", data=raw, content_type="application/json"
        )

    assert response.status_code == status
    assert response.json()["error"].startswith(f"Invalid request: {message}")
