"""Authorization across the whole app: every URL, with owner / stranger / anonymous personas.

URLs are enumerated from the real URLconf, so a new URL whose parameters this file cannot fill
fails `test_every_url_is_covered` until it is added here. An object named in a URL answers the
stranger 404 (or 405 for a method the view never accepts), never its content; every POST
without a CSRF token is refused; the run websocket refuses strangers, anonymous clients and
foreign origins.
"""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from tests.factories import QueryFactory, RunChunkFactory, RunFactory, UserFactory
from tests.webapp.shares.factories import ShareFactory
from webapp.agents.tokens import token_create
from webapp.asgi import application
from webapp.runs.models import RunImage, RunStatus
from webapp.shares.services import share_revoke
from webapp.workspaces.models import ChangeStatus, PendingChange

# Covered elsewhere: third-party login views (tests/webapp/accounts/test_google_login.py), the
# bearer-token API (tests/webapp/agents), Django's admin (staff only; checked below).
NOT_HERE = ("admin:", "social:", "api:")
# Answer without a CSRF token on purpose: GET-only health probe.
CSRF_EXEMPT = {"healthz"}
# URLs whose object is public to anyone holding the link (a live share).
PUBLIC_BY_LINK = {"shares:detail", "shares:fork", "shares:image"}
# Named in the URL but owned by nobody: a service a person connects (webapp/connections); its
# views act only for the signed-in person and keep nothing.
NOT_OWNED = {"provider_id"}
PNG = b"\x89PNG\r\n\x1a\n" + bytes(32)
PARAMS = {"query_id", "run_id", "token", "change_id", "token_id", "position"} | NOT_OWNED


def app_urls() -> dict[str, list[str]]:
    """{namespaced name: [parameter names]} for every URL of the app."""
    found: dict[str, list[str]] = {}

    def walk(patterns: list[Any], namespace: str) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                inner = pattern.namespace
                walk(pattern.url_patterns, f"{namespace}{inner}:" if inner else namespace)
            elif isinstance(pattern, URLPattern) and pattern.name:
                found[namespace + pattern.name] = list(pattern.pattern.converters)

    walk(get_resolver().url_patterns, "")
    return {k: v for k, v in found.items() if not k.startswith(NOT_HERE)}


URLS = app_urls()
OBJECT_URLS = sorted(name for name, params in URLS.items() if set(params) - NOT_OWNED)
PLAIN_URLS = sorted(name for name, params in URLS.items() if not params)


@pytest.fixture
def world(owner) -> dict[str, Any]:
    """The owner's query with a finished run and its decided change, a live and a revoked share."""
    query = QueryFactory(owner=owner)
    run = RunFactory(query=query, status=RunStatus.SUCCEEDED, exit_code=0)
    RunChunkFactory(run=run, text="owner's output\n")
    RunImage.objects.create(run=run, position=1, name="figure-1.png", mime="image/png", data=PNG)
    change = PendingChange.objects.create(run=run, kind="fs", status=ChangeStatus.KEPT)
    revoked = ShareFactory(query=query, include_output=True, output_run=run)
    share_revoke(share=revoked)
    share = ShareFactory(query=query, include_output=True, output_run=run)
    api_token = token_create(owner=owner, name="owner's agent").token
    return {
        "query": query,
        "run": run,
        "change": change,
        "share": share,
        "revoked": revoked,
        "api_token": api_token,
    }


def url_for(name: str, world: dict[str, Any], *, revoked: bool = False) -> str:
    share = world["revoked"] if revoked else world["share"]
    values = {
        "query_id": world["query"].pk,
        "run_id": world["run"].pk,
        "change_id": world["change"].pk,
        "token": share.token,
        "token_id": world["api_token"].pk,
        "position": 1,
        "provider_id": "generic",
    }
    return reverse(name, kwargs={param: values[param] for param in URLS[name]})


def statuses(client: Client, url: str) -> tuple[int, int]:
    return client.get(url).status_code, client.post(url).status_code


def test_every_url_is_covered() -> None:
    unknown = {name: params for name, params in URLS.items() if set(params) - PARAMS}
    assert unknown == {}


@pytest.mark.parametrize("name", OBJECT_URLS)
def test_it_answers_a_stranger_404(name: str, world, stranger_client: Client) -> None:
    url = url_for(name, world, revoked=name in PUBLIC_BY_LINK)
    answers = statuses(stranger_client, url)
    assert set(answers) <= {404, 405}
    assert 404 in answers


@pytest.mark.parametrize("name", OBJECT_URLS)
def test_it_never_shows_an_anonymous_visitor_the_owners_objects(name: str, world) -> None:
    url = url_for(name, world, revoked=name in PUBLIC_BY_LINK)
    for status in statuses(Client(), url):
        assert status in {302, 404, 405}


@pytest.mark.parametrize("name", OBJECT_URLS)
def test_the_owner_reaches_every_object_url(name: str, world, owner_client: Client) -> None:
    # Proves the stranger's 404 above comes from ownership, not from a wrong URL.
    get, post = statuses(owner_client, url_for(name, world))
    assert 404 not in (get, post)


@pytest.mark.parametrize("name", sorted(PUBLIC_BY_LINK))
def test_a_live_link_is_open_to_a_signed_in_visitor(name: str, world, stranger_client) -> None:
    get, post = statuses(stranger_client, url_for(name, world))
    assert 404 not in (get, post)


def test_the_owner_cannot_open_their_own_revoked_link(world, owner_client: Client) -> None:
    assert owner_client.get(url_for("shares:detail", world, revoked=True)).status_code == 404


@pytest.mark.parametrize("name", sorted(set(URLS) - CSRF_EXEMPT))
def test_every_post_needs_a_csrf_token(name: str, world, owner) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert client.post(url_for(name, world)).status_code == 403


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "form":
            self.forms.append({**attributes, "csrf": False})
        elif tag == "input" and self.forms and attributes.get("name") == "csrfmiddlewaretoken":
            self.forms[-1]["csrf"] = True


@pytest.mark.parametrize("name", sorted(n for n in URLS if n not in CSRF_EXEMPT))
def test_every_post_form_on_every_page_carries_a_csrf_token(name: str, world, owner_client):
    response = owner_client.get(url_for(name, world))
    parser = _Forms()
    html = response.status_code == 200 and response["Content-Type"].startswith("text/html")
    parser.feed(response.content.decode() if html else "")
    unsafe = [
        f for f in parser.forms if (f.get("method") or "").lower() == "post" and not f["csrf"]
    ]
    assert unsafe == []


@pytest.mark.parametrize("name", PLAIN_URLS)
def test_pages_without_objects_show_nothing_of_the_owners(name: str, world, stranger_client):
    response = stranger_client.get(reverse(name))
    body = response.content.decode(errors="replace")
    assert world["query"].prompt not in body
    assert world["share"].token not in body


def test_a_non_staff_person_cannot_use_the_admin(world, owner_client: Client) -> None:
    response = owner_client.get(reverse("admin:queries_query_changelist"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


# -- the run websocket --------------------------------------------------------------------------
ORIGIN = b"http://127.0.0.1:8000"


@database_sync_to_async
def _session_cookie(user: Any) -> bytes:
    client = Client()
    client.force_login(user)
    name = settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}".encode()


async def _ws_connects(run_id: int, user: Any, origin: bytes = ORIGIN) -> bool:
    headers = [(b"origin", origin), (b"host", b"127.0.0.1:8000")]
    if user is not None:
        headers.append((b"cookie", await _session_cookie(user)))
    communicator = WebsocketCommunicator(application, f"/ws/runs/{run_id}/", headers)
    connected, _ = await communicator.connect(timeout=30)
    await communicator.disconnect()
    return connected


@pytest.mark.django_db(transaction=True)
async def test_the_run_websocket_admits_only_the_owner_from_our_origin() -> None:
    run = await database_sync_to_async(RunFactory)(status=RunStatus.SUCCEEDED, exit_code=0)
    owner = await database_sync_to_async(lambda: run.query.owner)()
    stranger = await database_sync_to_async(UserFactory)()
    assert await _ws_connects(run.pk, owner) is True
    assert await _ws_connects(run.pk, stranger) is False
    assert await _ws_connects(run.pk, None) is False
    assert await _ws_connects(run.pk, owner, origin=b"http://evil.test") is False
