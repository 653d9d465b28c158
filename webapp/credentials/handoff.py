"""Hand a run's credentials from the web process to whoever executes the run, exactly once.

Credentials never go into task arguments, results, logs or the database. They wait in Django's
cache (local memory in the embedded mode, where the web process is also the worker; Redis in
production) under a key whose name is an HMAC of the run id with SECRET_KEY (so it cannot be
guessed or enumerated by run id), encrypted with a key derived from SECRET_KEY (so a Redis
snapshot on disk holds no plaintext), for UNDOABLE_CREDENTIAL_TTL_S. The first reader to delete the
key gets them; any other reader of the same run gets nothing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.core.cache import cache

_KEY_PREFIX = "cred:"


class CredentialHandoffError(RuntimeError):
    """The stashed credentials could not be read back (tampered with or wrong SECRET_KEY)."""


def credentials_stash(*, run_id: int | str, values: dict[str, str]) -> None:
    """Keep `values` for run `run_id` until `credentials_take` reads them or the TTL passes.

    Stashing again for the same run replaces the previous values. An empty dict stashes nothing.
    A job that is not a run (the query page's rehearsal) passes a string id of its own, which
    no run's integer id can equal.
    """
    if not values:
        return
    clean = {str(name): str(value) for name, value in values.items()}
    token = _fernet().encrypt(json.dumps(clean).encode())
    cache.set(_cache_key(run_id), token, timeout=settings.UNDOABLE_CREDENTIAL_TTL_S)


def credentials_take(*, run_id: int | str) -> dict[str, str]:
    """Return and forget the values stashed for `run_id`; {} if none (never stashed, expired,
    or taken by another reader first)."""
    key = _cache_key(run_id)
    token = cache.get(key)
    # Of concurrent readers, only the one whose delete removed the key may use what it read.
    if token is None or not cache.delete(key):
        return {}
    try:
        return json.loads(_fernet().decrypt(token))
    except InvalidToken:
        # Do not echo the token: it is ciphertext of secrets.
        raise CredentialHandoffError(f"credentials for run {run_id} cannot be decrypted") from None


def _derive(purpose: bytes) -> bytes:
    return hmac.new(
        settings.SECRET_KEY.encode(), b"undoable.credentials." + purpose, "sha256"
    ).digest()


def _cache_key(run_id: int | str) -> str:
    name = hmac.new(_derive(b"key-name"), str(run_id).encode(), hashlib.sha256).hexdigest()
    return _KEY_PREFIX + name


def _fernet() -> Fernet:
    return Fernet(base64.urlsafe_b64encode(_derive(b"encryption")))
