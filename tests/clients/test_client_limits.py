"""Client.limits_get / limits_set against the real server: an owner's unrestricted token sets
another token's limits; a limited token is refused (ActionRefused, naming why)."""

from __future__ import annotations

import pytest
from undoable_client import ActionRefused, Client

from tests.webapp.actions.test_token_limits_api import ONLY_REST, agent, agent_token, owner_token  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_client_sets_and_reads_another_tokens_limits(app_server, owner, agent):  # noqa: F811
    target = agent_token(owner).pk
    client = Client(app_server, owner.token)
    wanted = {**ONLY_REST, "pending_at_once": 3}
    assert client.limits_set(target, allowed_kinds=["rest"], pending_at_once=3) == wanted
    assert client.limits_get(target) == wanted
    with pytest.raises(ActionRefused, match="has limits of its own"):
        Client(app_server, agent.token).limits_set(owner_token(owner).pk, allowed_kinds=[])
