"""`manage.py check` (and so `migrate`, which every start runs first) refuses to go on when the
ledger has no key to sign with."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, register
from django.core.exceptions import ImproperlyConfigured

from webapp.audit.keys import audit_key


@register("audit")
def check_audit_key(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    if settings.EMBEDDED_AUDIT_KEY_FILE is not None:
        return []  # a single-machine install: migrate writes the key before anything appends
    try:
        audit_key()
    except ImproperlyConfigured as exc:
        return [
            Error(
                str(exc),
                hint="The key stays outside the database, so an edited entry cannot be re-signed.",
                id="audit.E001",
            )
        ]
    return []
