"""API tokens: stored hashed, revocable, created by command or on the account page."""

from __future__ import annotations

import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db.backends.signals import connection_created
from django.test import Client, override_settings

from webapp.agents import auth
from webapp.agents.models import ApiToken
from webapp.agents.tokens import token_authenticate, token_create, token_revoke

pytestmark = pytest.mark.django_db


def test_only_a_hash_of_the_token_is_stored(owner):
    stored = ApiToken.objects.get(owner=owner.user)
    assert stored.hashed == hashlib.sha256(owner.token.encode()).hexdigest()
    assert owner.token not in {stored.hashed, stored.prefix, stored.name}
    assert owner.token.startswith(stored.prefix)


def test_tokens_are_unique_and_long(owner):
    secrets = {token_create(owner=owner.user).secret for _ in range(20)}
    assert len(secrets) == 20
    assert min(len(s) for s in secrets) >= 40


def test_a_revoked_token_no_longer_authenticates(owner):
    token = token_authenticate(owner.token)
    token_revoke(owner=owner.user, token_id=token.pk)
    assert token_authenticate(owner.token) is None
    response = owner.post("/api/v1/exec", {"code": "print(1)"})
    assert response.status_code == 401


def test_a_stranger_cannot_revoke_my_token(owner, stranger):
    from django.http import Http404

    mine = ApiToken.objects.get(owner=owner.user)
    with pytest.raises(Http404):
        token_revoke(owner=stranger.user, token_id=mine.pk)
    assert token_authenticate(owner.token) is not None


def test_a_deactivated_user_token_no_longer_authenticates(owner):
    owner.user.is_active = False
    owner.user.save()
    assert token_authenticate(owner.token) is None


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # one character off
        lambda t: t + "x",
        lambda t: t.upper(),
        lambda t: "udb_' OR '1'='1",
        lambda t: "udb_" + hashlib.sha256(t.encode()).hexdigest(),  # the stored hash itself
        lambda t: t[4:],  # without the prefix
    ],
)
def test_only_the_exact_secret_authenticates(owner, mangle):
    assert token_authenticate(mangle(owner.token)) is None
    assert token_authenticate(owner.token) is not None


def test_the_owner_comes_loaded_with_the_token(owner, django_assert_num_queries):
    token = token_authenticate(owner.token)
    with django_assert_num_queries(0):  # async views read it and must not query
        assert token.owner.username == owner.user.username
    assert token.owner.is_active
    assert token.last_used_at is not None and token.created_at.tzinfo is not None


def test_authentication_records_last_use(owner):
    assert ApiToken.objects.get(owner=owner.user).last_used_at is None
    token_authenticate(owner.token)
    assert ApiToken.objects.get(owner=owner.user).last_used_at is not None


def test_the_command_prints_a_working_token_once_and_creates_nothing_else(owner):
    from django.contrib.auth import get_user_model

    users_before = get_user_model().objects.count()
    out, err = StringIO(), StringIO()
    call_command("create_api_token", "owner", "--name", "ci", stdout=out, stderr=err)
    secret = out.getvalue().strip()
    assert token_authenticate(secret).owner == owner.user
    assert ApiToken.objects.filter(owner=owner.user).count() == 2
    assert get_user_model().objects.count() == users_before
    assert "cannot be shown again" in err.getvalue()


def test_the_command_fails_clearly_for_an_unknown_user(db):
    with pytest.raises(CommandError, match="no user named 'ghost'"):
        call_command("create_api_token", "ghost", stdout=StringIO())
    assert ApiToken.objects.count() == 0


def test_the_account_page_creates_lists_and_revokes_tokens(owner):
    browser = Client()
    browser.force_login(owner.user)
    created = browser.post("/agents/tokens/new/", {"name": "laptop agent"})
    assert created.status_code == 200  # shown in the answer to the POST itself
    page = created.content.decode()
    new = ApiToken.objects.get(owner=owner.user, name="laptop agent")
    secret = page.split('id="new-api-token">')[1].split("<")[0]
    assert token_authenticate(secret) == new
    assert "laptop agent" in page and new.prefix in page
    # Shown once: the next visit no longer has it.
    assert secret not in browser.get("/accounts/").content.decode()
    browser.post(f"/agents/tokens/{new.pk}/revoke/")
    assert token_authenticate(secret) is None


def test_a_stranger_cannot_revoke_through_the_page(owner, stranger):
    browser = Client()
    browser.force_login(stranger.user)
    mine = ApiToken.objects.get(owner=owner.user)
    assert browser.post(f"/agents/tokens/{mine.pk}/revoke/").status_code == 404
    assert token_authenticate(owner.token) is not None


def test_token_forms_need_csrf(owner):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owner.user)
    assert browser.post("/agents/tokens/new/", {"name": "x"}).status_code == 403


@override_settings(AGENTS_TOKEN_RECHECK_S=0)  # every request looks its token up
def test_token_lookups_keep_their_database_connections_between_requests(owner, monkeypatch):
    lookups = ThreadPoolExecutor(max_workers=2, thread_name_prefix="test-lookup")
    monkeypatch.setattr(auth, "_lookups", lookups)
    opened: list[str] = []

    def record(sender: object, connection: object, **kwargs: object) -> None:
        opened.append(threading.current_thread().name)

    connection_created.connect(record)
    try:
        for _ in range(10):
            assert owner.post("/api/v1/exec", {}, raw=b"{").status_code == 400
    finally:
        connection_created.disconnect(record)
        lookups.shutdown()
    # One connection per lookup thread (a second thread may start when requests overlap it),
    # not one per request.
    assert 1 <= len([name for name in opened if name.startswith("test-lookup")]) <= 2
