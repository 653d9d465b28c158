"""Google login, offline, through the real social-auth views; only Google's endpoints are faked."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
import responses
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse
from social_django.models import UserSocialAuth

from tests.factories import UserFactory

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("google_configured"),
]

TOKEN_URL = "https://accounts.google.com/o/oauth2/token"
USERINFO_URL = "https://www.googleapis.com/oauth2/v3/userinfo"
ACCESS_TOKEN = "ya29.access-token-we-must-not-keep"
REFRESH_TOKEN = "1//refresh-token-we-must-not-keep"
ID_TOKEN = "eyJ.id-token-we-must-not-keep"


@pytest.fixture
def google_configured():
    with override_settings(
        SOCIAL_AUTH_GOOGLE_OAUTH2_KEY="test-client.apps.googleusercontent.com",
        SOCIAL_AUTH_GOOGLE_OAUTH2_SECRET="test-client-secret",
    ):
        yield


@pytest.fixture
def google():
    """Google's token and userinfo endpoints; anything else outside the test fails loudly."""
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        mock.add_passthru("http://127.0.0.1")
        mock.add_passthru("http://localhost")
        mock.post(
            TOKEN_URL,
            json={
                "access_token": ACCESS_TOKEN,
                "refresh_token": REFRESH_TOKEN,
                "id_token": ID_TOKEN,
                "token_type": "Bearer",
                "expires_in": 3599,
                "scope": "openid email profile",
            },
        )
        mock.get(
            USERINFO_URL,
            json={
                "sub": "109876543210",
                "email": "ana@example.com",
                "email_verified": True,
                "name": "Ana Diaz",
                "given_name": "Ana",
                "family_name": "Diaz",
            },
        )
        yield mock


def begin(client: Client) -> str:
    """POST to social:begin with a real CSRF token; return the state sent to Google."""
    client.get(reverse("accounts:login"))
    response = client.post(
        reverse("social:begin", args=["google-oauth2"]),
        {"csrfmiddlewaretoken": client.cookies["csrftoken"].value},
    )
    assert response.status_code == 302
    authorize = urlparse(response["Location"])
    params = parse_qs(authorize.query)
    assert (authorize.scheme, authorize.netloc, authorize.path) == (
        "https",
        "accounts.google.com",
        "/o/oauth2/auth",
    )
    assert params["client_id"] == ["test-client.apps.googleusercontent.com"]
    assert params["redirect_uri"] == [
        "http://testserver" + reverse("social:complete", args=["google-oauth2"])
    ]
    return params["state"][0]


def complete(client: Client, state: str):
    return client.get(
        reverse("social:complete", args=["google-oauth2"]),
        {"state": state, "code": "4/auth-code-from-google"},
    )


def test_a_person_signs_in_with_google(google: responses.RequestsMock) -> None:
    client = Client(enforce_csrf_checks=True)
    response = complete(client, begin(client))
    social = UserSocialAuth.objects.get(provider="google-oauth2", uid="109876543210")
    assert response.status_code == 302
    assert response["Location"] == reverse("queries:home")
    assert client.session["_auth_user_id"] == str(social.user.pk)
    assert social.user.email == "ana@example.com"
    token_call = google.calls[0].request
    assert parse_qs(token_call.body)["code"] == ["4/auth-code-from-google"]
    assert google.calls[1].request.headers["Authorization"] == f"Bearer {ACCESS_TOKEN}"


def test_google_tokens_are_not_kept(google: responses.RequestsMock, capsys) -> None:
    client = Client(enforce_csrf_checks=True)
    complete(client, begin(client))
    social = UserSocialAuth.objects.get(uid="109876543210")
    assert social.extra_data.get("sub") == "109876543210"
    assert not {"access_token", "refresh_token", "id_token"} & set(social.extra_data)
    capsys.readouterr()
    call_command("dumpdata", "social_django", "auth")
    dump = capsys.readouterr().out
    assert "109876543210" in dump
    for token in (ACCESS_TOKEN, REFRESH_TOKEN, ID_TOKEN):
        assert token not in dump


def test_a_second_login_finds_the_same_person(google: responses.RequestsMock) -> None:
    first, second = Client(), Client()
    complete(first, begin(first))
    complete(second, begin(second))
    assert get_user_model().objects.count() == 1
    assert second.session["_auth_user_id"] == first.session["_auth_user_id"]


def test_it_does_not_attach_google_to_a_local_account_by_email(
    google: responses.RequestsMock,
) -> None:
    local = UserFactory(username="ana", email="ana@example.com")
    client = Client()
    complete(client, begin(client))
    assert client.session["_auth_user_id"] != str(local.pk)
    assert not UserSocialAuth.objects.filter(user=local).exists()


def test_it_rejects_a_wrong_state(google: responses.RequestsMock) -> None:
    client = Client()
    begin(client)
    response = complete(client, "forged-state-value")
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("accounts:login"))
    assert "_auth_user_id" not in client.session
    assert not UserSocialAuth.objects.exists()
    assert len(google.calls) == 0


def test_begin_refuses_a_get_and_a_post_without_csrf() -> None:
    client = Client(enforce_csrf_checks=True)
    begin_url = reverse("social:begin", args=["google-oauth2"])
    assert client.get(begin_url).status_code == 405
    assert client.post(begin_url).status_code == 403
