"""Local username/password accounts: sign in, sign up, sign out, createsuperuser, account page."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse

from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db


def session_user_id(client: Client) -> str | None:
    return client.session.get("_auth_user_id")


def test_a_person_signs_in_with_a_local_password() -> None:
    user = UserFactory()
    client = Client(enforce_csrf_checks=True)
    client.get(reverse("accounts:login"))
    response = client.post(
        reverse("accounts:login"),
        {
            "username": user.username,
            "password": PASSWORD,
            "csrfmiddlewaretoken": client.cookies["csrftoken"].value,
        },
    )
    assert response.status_code == 302
    assert session_user_id(client) == str(user.pk)


def test_it_rejects_a_wrong_password() -> None:
    user = UserFactory()
    client = Client()
    response = client.post(
        reverse("accounts:login"), {"username": user.username, "password": "not it"}
    )
    assert response.status_code == 200
    assert session_user_id(client) is None


def test_it_rejects_a_login_without_csrf_token() -> None:
    user = UserFactory()
    client = Client(enforce_csrf_checks=True)
    response = client.post(
        reverse("accounts:login"), {"username": user.username, "password": PASSWORD}
    )
    assert response.status_code == 403
    assert session_user_id(client) is None


def test_a_person_signs_up_and_is_signed_in() -> None:
    client = Client()
    response = client.post(
        reverse("accounts:signup"),
        {"username": "newcomer", "password1": PASSWORD, "password2": PASSWORD},
    )
    user = get_user_model().objects.get(username="newcomer")
    assert response.status_code == 302
    assert session_user_id(client) == str(user.pk)
    assert user.check_password(PASSWORD)


def test_sign_up_refuses_a_weak_password() -> None:
    client = Client()
    response = client.post(
        reverse("accounts:signup"),
        {"username": "newcomer", "password1": "123", "password2": "123"},
    )
    assert response.status_code == 200
    assert not get_user_model().objects.filter(username="newcomer").exists()


@override_settings(UNDOABLE_ALLOW_SIGNUP=False)
def test_sign_up_can_be_closed() -> None:
    client = Client()
    assert client.get(reverse("accounts:signup")).status_code == 404
    assert "Create one" not in client.get(reverse("accounts:login")).content.decode()


def test_sign_out_is_a_post() -> None:
    client = Client()
    client.force_login(UserFactory())
    assert client.get(reverse("accounts:logout")).status_code == 405
    assert client.post(reverse("accounts:logout")).status_code == 302
    assert session_user_id(client) is None


def test_createsuperuser_makes_an_account_that_can_sign_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", PASSWORD)
    call_command("createsuperuser", interactive=False, username="admin", email="a@example.com")
    client = Client()
    client.post(reverse("accounts:login"), {"username": "admin", "password": PASSWORD})
    assert session_user_id(client) == str(get_user_model().objects.get(username="admin").pk)


def test_the_account_page_needs_a_signed_in_person() -> None:
    response = Client().get(reverse("accounts:account"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("accounts:login"))


def test_the_account_page_holds_the_credentials_panel_and_api_tokens() -> None:
    client = Client()
    client.force_login(UserFactory(username="ana"))
    body = client.get(reverse("accounts:account")).content.decode()
    assert "ana" in body
    assert "data-credentials-panel" in body
    assert 'id="api-tokens"' in body


@override_settings(SOCIAL_AUTH_GOOGLE_OAUTH2_KEY="", SOCIAL_AUTH_GOOGLE_OAUTH2_SECRET="")
def test_the_google_button_is_hidden_when_google_is_not_configured() -> None:
    body = Client().get(reverse("accounts:login")).content.decode()
    assert reverse("social:begin", args=["google-oauth2"]) not in body


@override_settings(SOCIAL_AUTH_GOOGLE_OAUTH2_KEY="id", SOCIAL_AUTH_GOOGLE_OAUTH2_SECRET="secret")
def test_the_google_button_is_a_post_form_with_csrf_when_configured() -> None:
    body = Client().get(reverse("accounts:login")).content.decode()
    begin = reverse("social:begin", args=["google-oauth2"])
    form = body[body.index(f'action="{begin}"') - 30 : body.index("Sign in with Google")]
    assert 'method="post"' in form
    assert "csrfmiddlewaretoken" in form
