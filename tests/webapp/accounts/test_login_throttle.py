"""Login throttling: wrong passwords lock a username, or a client address, out for a while."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from django.test import Client, override_settings
from django.urls import reverse

from tests.factories import PASSWORD, UserFactory
from tests.servers import RedisServer
from tests.webapp.fresh_interpreter import probe_state
from webapp.accounts import throttle

pytestmark = pytest.mark.django_db


def sign_in(username: str, password: str, *, address: str = "127.0.0.1") -> tuple[Client, int]:
    client = Client(REMOTE_ADDR=address)
    response = client.post(reverse("accounts:login"), {"username": username, "password": password})
    return client, response.status_code


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def test_after_five_wrong_passwords_the_right_one_is_refused_for_that_user_only() -> None:
    ana, ben = UserFactory(), UserFactory()
    assert [sign_in(ana.username, "wrong")[1] for _ in range(5)] == [200] * 5
    client = Client()
    response = client.post(
        reverse("accounts:login"), {"username": ana.username, "password": PASSWORD}
    )
    assert response.status_code == 429
    assert 290 <= int(response["Retry-After"]) <= 300
    assert "Too many failed sign-in attempts" in response.content.decode()
    assert "Try again in 5 minutes" in response.content.decode()
    assert not signed_in(client)
    # Another person, from the same address, is not affected.
    client, status = sign_in(ben.username, PASSWORD)
    assert (status, signed_in(client)) == (302, True)


def test_the_admin_sign_in_is_throttled_the_same_way() -> None:
    staff = UserFactory(is_staff=True, is_superuser=True)
    for _ in range(3):
        sign_in(staff.username, "wrong")
    for _ in range(2):
        Client().post("/admin/login/", {"username": staff.username, "password": "wrong"})
    client = Client()
    response = client.post("/admin/login/", {"username": staff.username, "password": PASSWORD})
    assert "Too many failed sign-in attempts" in response.content.decode()
    assert not signed_in(client)


def test_the_username_is_counted_whatever_its_case() -> None:
    UserFactory(username="ana")
    for name in ("ana", "ANA", "Ana", "aNa", "anA"):
        sign_in(name, "wrong")
    assert sign_in("ana", PASSWORD)[1] == 429


def test_a_right_password_clears_the_count_before_the_limit() -> None:
    ana = UserFactory()
    for _ in range(4):
        sign_in(ana.username, "wrong")
    assert sign_in(ana.username, PASSWORD)[1] == 302
    for _ in range(4):
        sign_in(ana.username, "wrong")
    assert sign_in(ana.username, PASSWORD)[1] == 302


def test_a_form_without_a_password_does_not_clear_the_count() -> None:
    ana = UserFactory()
    for _ in range(4):
        sign_in(ana.username, "wrong")
    sign_in(ana.username, "")
    sign_in(ana.username, "wrong")
    assert sign_in(ana.username, PASSWORD)[1] == 429


@override_settings(ACCOUNTS_LOGIN_MAX_FAILURES_PER_ADDRESS=20)
def test_one_address_guessing_many_names_is_locked_out_and_others_are_not() -> None:
    for n in range(20):
        sign_in(f"guess{n}", "wrong", address="203.0.113.9")
    ana = UserFactory()
    assert sign_in(ana.username, PASSWORD, address="203.0.113.9")[1] == 429
    client, status = sign_in(ana.username, PASSWORD, address="198.51.100.4")
    assert (status, signed_in(client)) == (302, True)


@override_settings(SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"))
def test_behind_the_proxy_the_address_is_the_one_the_proxy_saw() -> None:
    client = Client(REMOTE_ADDR="10.0.0.2")
    request = client.get("/", headers={"X-Forwarded-For": "1.2.3.4, 203.0.113.9"}).wsgi_request
    assert throttle.client_address(request) == "203.0.113.9"


def test_without_the_proxy_setting_a_forwarded_address_is_ignored() -> None:
    client = Client(REMOTE_ADDR="10.0.0.2")
    request = client.get("/", headers={"X-Forwarded-For": "203.0.113.9"}).wsgi_request
    assert throttle.client_address(request) == "10.0.0.2"


@pytest.fixture
def redis_cache_url(redis_server: RedisServer) -> Iterator[str]:
    """The cache in a database of the session's Redis."""
    url = redis_server.url(9)
    backend = "django.core.cache.backends.redis.RedisCache"
    with override_settings(CACHES={"default": {"BACKEND": backend, "LOCATION": url}}):
        yield url


def test_with_redis_the_lockout_is_kept_where_every_web_process_sees_it(
    redis_cache_url: str,
) -> None:
    shared = redis.Redis.from_url(redis_cache_url)
    shared.flushdb()
    try:
        ana = UserFactory()
        for _ in range(5):
            sign_in(ana.username, "wrong")
        assert sign_in(ana.username, PASSWORD)[1] == 429
        assert [k for k in shared.scan_iter(match="*login-throttle:user:*:locked")]
    finally:
        shared.flushdb()
        shared.close()


SETTINGS_PROBE = """
import json, os
os.environ["DJANGO_SETTINGS_MODULE"] = "webapp.settings"
from django.conf import settings
print(json.dumps([settings.UNDOABLE_ALLOW_SIGNUP, settings.CACHES["default"]["BACKEND"]]))
"""


@pytest.mark.parametrize(
    ("environ", "signup", "cache"),
    [
        ({}, True, "locmem"),
        ({"REDIS_URL": "redis://127.0.0.1:6379/0"}, False, "redis"),
        ({"DATABASE_URL": "postgres://u:p@127.0.0.1:5432/undoable"}, False, "locmem"),
        ({"REDIS_URL": "redis://127.0.0.1:6379/0", "UNDOABLE_ALLOW_SIGNUP": "true"}, True, "redis"),
    ],
)
def test_sign_up_is_open_by_default_only_on_the_embedded_single_machine(
    environ: dict[str, str], signup: bool, cache: str, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    for name in ("REDIS_URL", "DATABASE_URL", "UNDOABLE_ALLOW_SIGNUP"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    allowed, backend = probe_state(SETTINGS_PROBE, tmp_path)
    assert (allowed, cache in backend) == (signup, True)


@pytest.mark.sabotage
def test_sabotage_without_the_throttle_the_right_password_logs_in_after_twenty_failures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(throttle, "login_lockout_s", lambda **_: None)
    ana = UserFactory()
    for _ in range(20):
        sign_in(ana.username, "wrong")
    client, status = sign_in(ana.username, PASSWORD)
    assert (status, signed_in(client)) == (302, True)
