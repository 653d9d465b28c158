"""Bearer-token authentication for the agent API.

Every API request looks its token up, so the lookups run on a few long-lived threads of their
own whose database connections stay open between requests. Django's default, a thread made for
each request (its ThreadSensitiveContext), opens and closes a connection every time, and for
SQLite that means re-reading the schema too: ~2 ms of the server's CPU per request, measured
on a bad-JSON 400, against ~28 ms of CPU for a whole `print(1+1)` run in a fresh sandbox.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from django.db import InterfaceError, OperationalError, connection
from django.http import HttpRequest
from ninja.security import HttpBearer

from webapp.agents.bearers import known_bearers
from webapp.agents.models import ApiToken
from webapp.agents.recent_tokens import recent_tokens
from webapp.agents.tokens import token_authenticate, token_digest

# Lookups take ~0.1 ms; two threads keep one slow query (a locked SQLite file, a database
# restarting) from holding up every request.
_lookups = ThreadPoolExecutor(max_workers=2, thread_name_prefix="api-token-lookup")


def token_lookup(secret: str) -> ApiToken | None:
    """token_authenticate on this thread's kept connection; a broken one is replaced, once.

    Nothing closes these connections between requests (Django's request signals run on other
    threads), so one the database dropped (a restart, a network cut) shows up here as an error.
    """
    try:
        return token_authenticate(secret)
    except (InterfaceError, OperationalError):
        connection.close()
        return token_authenticate(secret)


class TokenAuth(HttpBearer):
    """`Authorization: Bearer udb_...` -> the ApiToken (request.auth); its owner is loaded."""

    # Lets ninja await authenticate() in async views instead of hopping threads for it.
    is_async = True

    async def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        return await token_for_secret(token)


async def token_for_secret(token: str) -> ApiToken | None:
    """The active ApiToken whose secret is `token`, its owner loaded, or None: what TokenAuth
    finds, also for the request guard that checks a token before a body is read
    (webapp.server.request_bodies)."""
    loop = asyncio.get_running_loop()
    secret = token.strip()
    digest = token_digest(secret)
    found = recent_tokens.get(digest)
    if found is None:
        looked_up_after = recent_tokens.forgotten
        found = await loop.run_in_executor(_lookups, token_lookup, secret)
        if found is not None:
            recent_tokens.note(digest, found, looked_up_after=looked_up_after)
    if found is not None:
        known_bearers.note(secret, found.pk, found.owner_id)  # see webapp.server.refused_early
    return found


_token_auth = TokenAuth()


async def authenticated(request: HttpRequest) -> ApiToken | None:
    """The request's token as the ninja API's auth finds it (TokenAuth), or None: for the
    endpoint served without ninja (webapp.agents.exec_api.exec_view)."""
    found = _token_auth(request)  # None without a bearer token, else the lookup to await
    return None if found is None else await found
