"""`/` for a visitor who is not signed in: the landing page (what Undoable does, and sign in)."""

from __future__ import annotations

from django.test import Client, override_settings
from django.urls import reverse


def test_an_anonymous_visitor_gets_the_landing_page_with_a_sign_in_form(client, db) -> None:
    response = client.get(reverse("queries:home"))

    assert response.status_code == 200
    assert [t.name for t in response.templates][0] == "landing/landing.html"
    page = response.content.decode()
    assert "forward" in page and "reverse" in page
    assert f'action="{reverse("accounts:login")}"' in page
    assert "<svg" in page  # the forward/undo picture is inline: nothing fetched from elsewhere


def test_the_landing_page_offers_google_only_when_it_is_configured(client, db) -> None:
    assert 'data-testid="google-login"' not in client.get("/").content.decode()

    with override_settings(
        SOCIAL_AUTH_GOOGLE_OAUTH2_KEY="key", SOCIAL_AUTH_GOOGLE_OAUTH2_SECRET="secret"
    ):
        page = client.get("/").content.decode()

    assert 'data-testid="google-login"' in page
    assert reverse("social:begin", args=["google-oauth2"]) in page


@override_settings(UNDOABLE_ALLOW_SIGNUP=False)
def test_the_landing_page_offers_sign_up_only_when_it_is_open(client, db) -> None:
    assert reverse("accounts:signup") not in client.get("/").content.decode()


def test_a_signed_in_owner_gets_the_prompt_page(owner_client: Client) -> None:
    response = owner_client.get(reverse("queries:home"))

    assert response.status_code == 200
    assert "landing/landing.html" not in [t.name for t in response.templates]
    assert "data-prompt-form" in response.content.decode()


def test_an_unknown_page_is_a_404_with_the_site_header(client, db) -> None:
    response = client.get("/no-such-page/")

    assert response.status_code == 404
    page = response.content.decode()
    assert 'class="site-header"' in page
    assert 'data-testid="not-found"' in page
