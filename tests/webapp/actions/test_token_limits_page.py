"""The owner sets a token's damage limits on its page (linked from the account page), through
the same validation as `manage.py token_limits`; bad input is answered with the field's error and
nothing changes; another person's token answers 404 (and, its owner filter switched off, the
sabotage shows it could be changed)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from webapp.actions import limits_views
from webapp.actions.limits import NO_LIMITS, token_limits
from webapp.agents.models import ApiToken

FORM = {
    "allowed_kinds": "python, rest",
    "allowed_hosts": "*.slack.com, 127.0.0.1:8080",
    "allowed_db_targets": "",
    "actions_per_hour": "20",
    "pending_at_once": "",
    "review_required": "on",
    "rehearsal_required": "",
}


def signed_in(persona) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(persona.user)
    return client


def page_url(persona) -> str:
    token = ApiToken.objects.get(owner=persona.user)
    return reverse("limits:token-limits", args=[token.pk])


def post_form(client: Client, url: str, form: dict[str, str]):
    """The form as a browser posts it: the CSRF token from the page, a checkbox only if on."""
    page = client.get(url)
    sent = {name: value for name, value in form.items() if not name.endswith("_required") or value}
    return client.post(url, {**sent, "csrfmiddlewaretoken": page.context["csrf_token"]})


def test_the_owner_sets_a_tokens_limits_on_its_page(owner):
    client = signed_in(owner)
    url = page_url(owner)
    assert url in client.get(reverse("accounts:account")).content.decode()  # linked there
    answer = post_form(client, url, FORM)
    assert answer.status_code == 302
    limits = token_limits(ApiToken.objects.get(owner=owner.user))
    assert limits.allowed_kinds == ["python", "rest"]
    assert limits.allowed_hosts == ["*.slack.com", "127.0.0.1:8080"]
    caps = (limits.actions_per_hour, limits.pending_at_once)
    assert (caps, limits.review_required, limits.rehearsal_required) == ((20, None), True, False)
    shown = client.get(url).content.decode()
    assert 'value="python, rest"' in shown
    assert "saved" in shown


def test_a_post_without_the_csrf_token_is_refused(owner):
    answer = signed_in(owner).post(page_url(owner), FORM)
    assert answer.status_code == 403
    assert token_limits(ApiToken.objects.get(owner=owner.user)) == NO_LIMITS


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("allowed_kinds", "python, shell", "unknown kinds: shell (kinds are python, fs, db, rest)"),
        ("allowed_db_targets", "prod.db", "db targets are sqlite:PATH or url:CREDENTIAL"),
        ("actions_per_hour", "many", "Enter a whole number."),
    ],
)
def test_bad_input_is_answered_with_the_fields_error_and_nothing_changes(
    owner, field, value, error
):
    client = signed_in(owner)
    answer = post_form(client, page_url(owner), {**FORM, field: value})
    assert answer.status_code == 400
    assert error in answer.context["form"].errors[field][0]
    assert error.split(" (")[0] in answer.content.decode().replace("&#x27;", "'")
    assert token_limits(ApiToken.objects.get(owner=owner.user)) == NO_LIMITS


def test_deny_another_persons_token_answers_404_and_keeps_its_limits(owner, stranger):
    client = signed_in(stranger)
    url = page_url(owner)
    assert client.get(url).status_code == 404
    page = client.get(page_url(stranger))  # a CSRF token this person really has
    answer = client.post(url, {**FORM, "csrfmiddlewaretoken": page.context["csrf_token"]})
    assert answer.status_code == 404
    assert token_limits(ApiToken.objects.get(owner=owner.user)) == NO_LIMITS


@pytest.mark.sabotage
def test_sabotage_without_the_owner_filter_another_persons_token_is_changed(
    owner, stranger, monkeypatch
):
    monkeypatch.setattr(
        limits_views, "owned_token", lambda owner, token_id: ApiToken.objects.get(pk=token_id)
    )
    client = signed_in(stranger)
    answer = post_form(client, page_url(owner), FORM)
    assert answer.status_code == 302
    assert token_limits(ApiToken.objects.get(owner=owner.user)).allowed_kinds == ["python", "rest"]
