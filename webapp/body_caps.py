"""A request body as its head declares it, and how a site view declares the largest body it
takes: webapp.server.request_bodies enforces that cap from the head, before Django reads the
body."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

View = TypeVar("View", bound=Callable[..., Any])


def body_cap(max_bytes: Callable[[], int]) -> Callable[[View], View]:
    """Mark a view as taking bodies of up to `max_bytes()` bytes rather than the default (Django's
    DATA_UPLOAD_MAX_MEMORY_SIZE). Django's view decorators copy the mark to their wrappers."""

    def mark(view: View) -> View:
        view.max_body_bytes = max_bytes  # type: ignore[attr-defined]
        return view

    return mark


def view_body_cap(view: Callable[..., Any], *, default: int) -> int:
    cap = getattr(view, "max_body_bytes", None)
    return default if cap is None else cap()


def declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """A request's Content-Length (0 without one: no body), or None for a chunked body."""
    length = 0
    for name, value in headers:
        if name == b"transfer-encoding":
            return None
        if name == b"content-length" and value.isdigit():
            length = int(value)
    return length
