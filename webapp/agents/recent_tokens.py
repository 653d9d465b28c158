"""Tokens this web process checked a moment ago, so an agent's next request skips the lookup.

Every API request authenticates, and the lookup is a hop to a database thread and back: ~0.4 ms
of a ~5 ms `print(1+1)` round trip (docs/benchmarks.md, "Fewer hops"). A token found active is
trusted again for AGENTS_TOKEN_RECHECK_S (1 s; 0: never). Revoking a token, or changing or
deleting its owner, forgets it at once in the process that did it (the model signals below);
another web process notices at its next check, at most that long after.

Entries are keyed by the secret's SHA-256, never by the secret, and bounded in number.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save

from webapp.agents import conf
from webapp.agents.models import ApiToken

MAX_ENTRIES = 4096


class RecentTokens:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._found: OrderedDict[str, tuple[ApiToken, float]] = OrderedDict()
        self._lock = threading.Lock()
        self.forgotten = 0  # how many forget()s so far: see note()

    def get(self, digest: str) -> ApiToken | None:
        """The token checked under `digest` less than the recheck time ago, else None."""
        with self._lock:
            entry = self._found.get(digest)
            if entry is None:
                return None
            token, checked = entry
            if self.clock() - checked >= conf.get("AGENTS_TOKEN_RECHECK_S"):
                del self._found[digest]
                return None
            return token

    def note(self, digest: str, token: ApiToken, *, looked_up_after: int) -> None:
        """Trust `token`, found active by a lookup that began when `forgotten` was
        `looked_up_after`; unless something was forgotten since, which the lookup may predate
        (a revocation committed while it ran)."""
        if conf.get("AGENTS_TOKEN_RECHECK_S") <= 0:
            return
        with self._lock:
            if self.forgotten != looked_up_after:
                return
            self._found[digest] = (token, self.clock())
            self._found.move_to_end(digest)
            while len(self._found) > MAX_ENTRIES:
                self._found.popitem(last=False)

    def forget(self, *, token_id: int | None = None, owner_id: int | None = None) -> None:
        with self._lock:
            self.forgotten += 1
            for digest, (token, _) in list(self._found.items()):
                if token.pk == token_id or token.owner_id == owner_id:
                    del self._found[digest]

    def clear(self) -> None:
        with self._lock:
            self._found.clear()


recent_tokens = RecentTokens()


def _token_changed(sender: Any, instance: ApiToken, **kwargs: Any) -> None:
    recent_tokens.forget(token_id=instance.pk)


def _owner_changed(sender: Any, instance: Any, **kwargs: Any) -> None:
    recent_tokens.forget(owner_id=instance.pk)


def connect_signals() -> None:
    """Called once, from the app's ready(). Any save counts (revoked_at, is_active, a password):
    forgetting costs one lookup, keeping a stale token could cost a revocation."""
    user_model = get_user_model()
    for name, signal in (("save", post_save), ("delete", post_delete)):
        signal.connect(_token_changed, sender=ApiToken, dispatch_uid=f"recent-token-{name}")
        signal.connect(_owner_changed, sender=user_model, dispatch_uid=f"recent-owner-{name}")
