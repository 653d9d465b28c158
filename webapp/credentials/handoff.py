"""Hand a run's credentials from the web process to whoever executes the run, exactly once.

Credentials never go into task arguments, results, logs or the database. In the embedded mode
(RUNNER="threads") the web process is also the worker, so they wait in a lock-guarded dict. With
Celery they wait in Redis under a key whose name is an HMAC of the run id with SECRET_KEY (so it
cannot be guessed or enumerated by run id), encrypted with a key derived from SECRET_KEY (so a
Redis snapshot on disk holds no plaintext), with a TTL of CREDENTIAL_TTL_S, and read with GETDEL
so the first reader removes them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time

import redis
from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

from webapp.redis_client import redis_client

_KEY_PREFIX = "undoable:cred:"

_lock = threading.Lock()
_pending: dict[int, tuple[float, dict[str, str]]] = {}


class CredentialHandoffError(RuntimeError):
    """The stashed credentials could not be read back (tampered with or wrong SECRET_KEY)."""


def credentials_stash(*, run_id: int, values: dict[str, str]) -> None:
    """Keep `values` for run `run_id` until `credentials_take` reads them or the TTL passes.

    Stashing again for the same run replaces the previous values. An empty dict stashes nothing.
    """
    if not values:
        return
    clean = {str(name): str(value) for name, value in values.items()}
    ttl_s = settings.CREDENTIAL_TTL_S
    if settings.RUNNER == "threads":
        with _lock:
            _purge_expired_locked()
            _pending[run_id] = (time.monotonic() + ttl_s, clean)
        return
    token = _fernet().encrypt(json.dumps(clean).encode())
    _redis().set(_redis_key(run_id), token, ex=ttl_s)


def credentials_take(*, run_id: int) -> dict[str, str]:
    """Return and forget the values stashed for `run_id`; {} if none (never stashed or expired)."""
    if settings.RUNNER == "threads":
        with _lock:
            _purge_expired_locked()
            entry = _pending.pop(run_id, None)
        return dict(entry[1]) if entry else {}
    token = _redis().getdel(_redis_key(run_id))
    if token is None:
        return {}
    try:
        return json.loads(_fernet().decrypt(token))
    except InvalidToken:
        # Do not echo the token: it is ciphertext of secrets.
        raise CredentialHandoffError(f"credentials for run {run_id} cannot be decrypted") from None


def _purge_expired_locked() -> None:
    now = time.monotonic()
    for run_id in [rid for rid, (deadline, _) in _pending.items() if deadline <= now]:
        del _pending[run_id]


def _derive(purpose: bytes) -> bytes:
    return hmac.new(
        settings.SECRET_KEY.encode(), b"undoable.credentials." + purpose, "sha256"
    ).digest()


def _redis_key(run_id: int) -> str:
    name = hmac.new(_derive(b"key-name"), str(run_id).encode(), hashlib.sha256).hexdigest()
    return _KEY_PREFIX + name


def _fernet() -> Fernet:
    return Fernet(base64.urlsafe_b64encode(_derive(b"encryption")))


def _redis() -> redis.Redis:
    return redis_client(settings.REDIS_URL)
