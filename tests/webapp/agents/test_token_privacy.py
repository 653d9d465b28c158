"""A new API token is shown once, in the answer to the POST that made it, and stored nowhere."""

from __future__ import annotations

from importlib import import_module

from django.conf import settings
from django.contrib.sessions.models import Session
from django.test import Client

from webapp.agents.models import ApiToken
from webapp.agents.tokens import token_authenticate


def shown_token(page: str) -> str:
    return page.split('id="new-api-token">')[1].split("<")[0]


def test_a_new_token_never_reaches_the_session_table(owner):
    browser = Client()
    browser.force_login(owner.user)

    created = browser.post("/agents/tokens/new/", {"name": "laptop agent"})

    secret = shown_token(created.content.decode())
    assert token_authenticate(secret) == ApiToken.objects.get(name="laptop agent")
    assert created["Cache-Control"] == "no-store"
    store = import_module(settings.SESSION_ENGINE).SessionStore
    rows = list(Session.objects.all())
    assert rows  # the browser's session is there, and holds no token
    for row in rows:
        assert secret not in row.session_data
        assert secret not in repr(store().decode(row.session_data))
    assert secret not in created.cookies.output()


def test_the_next_visit_does_not_show_it_again(owner):
    browser = Client()
    browser.force_login(owner.user)
    secret = shown_token(browser.post("/agents/tokens/new/", {"name": "x"}).content.decode())

    page = browser.get("/accounts/").content.decode()

    assert secret not in page
    assert 'id="new-api-token"' not in page
