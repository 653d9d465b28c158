"""Bearer tokens as the layers in front of Django see them: the secret read from the request
head, and the tokens this process authenticated lately, remembered by digest (never the secret)
with their ids, so that webapp.server.refused_early can tell whose run request it holds before
Django looks the token up."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


def bearer_digest(secret: str) -> bytes:
    """What a token is remembered by here: never the secret itself."""
    return hashlib.blake2b(secret.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def bearer_secret(scope: dict[str, Any]) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, read as ninja's HttpBearer does."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, secret = value.decode("latin-1").partition(" ")
            return secret.strip() if scheme.lower() == "bearer" else None
    return None


class KnownBearers:
    """Token digest -> (the token's id, its owner's), for tokens this process authenticated
    lately (bounded)."""

    MAX_KNOWN = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: OrderedDict[bytes, tuple[Hashable, Hashable]] = OrderedDict()

    def note(self, secret: str, token: Hashable, owner: Hashable) -> None:
        digest = bearer_digest(secret)
        with self._lock:
            self._ids[digest] = (token, owner)
            self._ids.move_to_end(digest)
            if len(self._ids) > self.MAX_KNOWN:
                self._ids.popitem(last=False)

    def ids(self, secret: str) -> tuple[Hashable, Hashable] | None:
        """(token id, owner id) of a known token, else None."""
        with self._lock:
            return self._ids.get(bearer_digest(secret))

    def reset(self) -> None:
        with self._lock:
            self._ids.clear()


known_bearers = KnownBearers()
