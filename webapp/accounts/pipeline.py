"""social-auth pipeline steps. We sign people in with Google; we never call Google for them."""

from __future__ import annotations

from typing import Any

# Anything that would let us (or whoever reads our database) act as the person at Google.
TOKEN_FIELDS = ("access_token", "refresh_token", "id_token", "token_type", "expires", "auth_time")


def load_extra_data_without_tokens(
    backend: Any,
    details: dict[str, Any],
    response: dict[str, Any],
    uid: str,
    *args: Any,
    **kwargs: Any,
) -> None:
    """Replace social-core's load_extra_data: keep the provider's extra data minus every token.

    The stored dict is rebuilt rather than merged, so a token kept by an older version is dropped
    at the next login too.
    """
    social = kwargs.get("social")
    if social is None:
        return
    extra = backend.extra_data(kwargs.get("user"), uid, response, details, kwargs)
    social.extra_data = {k: v for k, v in extra.items() if k not in TOKEN_FIELDS}
    social.save(update_fields=["extra_data"])
