"""A web process trusts a token it found active for AGENTS_TOKEN_RECHECK_S, and forgets it at once
when the token or its owner changes here; another process's revocation is seen at the recheck."""

from __future__ import annotations

import pytest
from django.db.models.signals import post_save
from django.test import override_settings
from django.utils import timezone

from tests.fakes.clock import ManualClock
from webapp.agents import auth, recent_tokens
from webapp.agents.models import ApiToken
from webapp.agents.recent_tokens import RecentTokens
from webapp.agents.tokens import token_revoke

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock(monkeypatch) -> ManualClock:
    fake = ManualClock()
    monkeypatch.setattr(recent_tokens.recent_tokens, "clock", fake)
    return fake


@pytest.fixture
def lookups(monkeypatch) -> list[str]:
    """The secrets looked up in the database, in order."""
    seen: list[str] = []
    real = auth.token_lookup

    def counted(secret: str) -> ApiToken | None:
        seen.append(secret)
        return real(secret)

    monkeypatch.setattr(auth, "token_lookup", counted)
    return seen


def exec_status(persona, code: str = "print(1)") -> int:
    return persona.post("/api/v1/exec", {"code": code}).status_code


def test_a_token_just_checked_is_not_looked_up_again_until_its_recheck(owner, clock, lookups):
    assert [exec_status(owner) for _ in range(3)] == [200, 200, 200]
    assert len(lookups) == 1
    clock.now += 1.0
    assert exec_status(owner) == 200
    assert len(lookups) == 2


@override_settings(AGENTS_TOKEN_RECHECK_S=0)
def test_with_no_recheck_time_every_request_looks_its_token_up(owner, lookups):
    assert [exec_status(owner) for _ in range(3)] == [200, 200, 200]
    assert len(lookups) == 3


def revoked_here(owner) -> int:
    assert exec_status(owner) == 200  # now trusted for a second
    token_revoke(owner=owner.user, token_id=ApiToken.objects.get(owner=owner.user).pk)
    return exec_status(owner)


def test_a_token_revoked_in_this_process_is_refused_on_the_next_request(owner, clock):
    assert revoked_here(owner) == 401


@pytest.mark.sabotage
def test_sabotage_unheard_a_revoked_token_is_still_served(owner, clock):
    post_save.disconnect(sender=ApiToken, dispatch_uid="recent-token-save")
    try:
        assert revoked_here(owner) == 200  # the breach the signal closes
    finally:
        recent_tokens.connect_signals()


def test_a_deactivated_owners_token_is_refused_on_the_next_request(owner, clock):
    assert exec_status(owner) == 200
    owner.user.is_active = False
    owner.user.save()
    assert exec_status(owner) == 401


def test_a_token_revoked_by_another_process_is_refused_at_the_recheck(owner, clock):
    assert exec_status(owner) == 200
    # Another web process's revocation: a database write this process hears nothing of.
    ApiToken.objects.filter(owner=owner.user).update(revoked_at=timezone.now())
    clock.now += 0.5
    assert exec_status(owner) == 200
    clock.now += 0.5
    assert exec_status(owner) == 401


def test_a_lookup_that_began_before_a_revocation_is_not_trusted(owner):
    tokens = RecentTokens()
    token = ApiToken.objects.get(owner=owner.user)
    began = tokens.forgotten
    tokens.forget(token_id=token.pk)  # revoked while the lookup ran
    tokens.note("digest", token, looked_up_after=began)
    assert tokens.get("digest") is None
    tokens.note("digest", token, looked_up_after=tokens.forgotten)
    assert tokens.get("digest") is token


def test_the_tokens_kept_are_bounded(owner, monkeypatch):
    monkeypatch.setattr(recent_tokens, "MAX_ENTRIES", 3)
    tokens = RecentTokens()
    token = ApiToken.objects.get(owner=owner.user)
    for n in range(5):
        tokens.note(f"digest{n}", token, looked_up_after=0)
    assert [tokens.get(f"digest{n}") for n in range(5)] == [None, None, token, token, token]
