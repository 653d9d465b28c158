"""The ledger's HMAC key. It lives outside the database (a setting, or a file in var/), so that
whoever can edit the database still cannot sign an edited entry."""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

MISSING = (
    "UNDOABLE_AUDIT_KEY is not set: the ledger cannot sign its entries. Set it (or "
    "UNDOABLE_AUDIT_KEY_FILE) to a long random value, the same on every web process and worker"
)


def audit_key() -> bytes:
    """UNDOABLE_AUDIT_KEY; else the embedded install's var/audit-key (written by migrate); else,
    only with DEBUG, one derived from SECRET_KEY. ImproperlyConfigured when there is none."""
    given = settings.UNDOABLE_AUDIT_KEY
    if given:
        return given.encode()
    path = settings.EMBEDDED_AUDIT_KEY_FILE
    if path is not None:
        try:
            embedded = path.read_text().strip()
        except FileNotFoundError:
            embedded = ""
        if embedded:
            return embedded.encode()
    if settings.DEBUG and settings.SECRET_KEY:
        return hmac.new(settings.SECRET_KEY.encode(), b"undoable.audit", hashlib.sha256).digest()
    if path is not None:
        raise ImproperlyConfigured(f"{path} is missing: run `manage.py migrate`, which writes it")
    raise ImproperlyConfigured(MISSING)
