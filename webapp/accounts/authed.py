"""The request type of views behind @login_required, so `request.user` is typed as a real user."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest


class AuthedHttpRequest(HttpRequest):
    """An HttpRequest whose user is signed in.

    Annotation only, never instantiated: Django passes its own request object. Use it as the
    type of `request` in a view decorated with @login_required (which turns anonymous users
    away before the view runs), so the type checker knows `request.user` is a `User` rather
    than `User | AnonymousUser`. Views reachable anonymously keep `HttpRequest` and narrow
    with `request.user.is_authenticated`.
    """

    user: User
