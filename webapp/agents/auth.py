"""Bearer-token authentication for the agent API."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja.security import HttpBearer

from webapp.agents.models import ApiToken
from webapp.agents.tokens import token_authenticate


class TokenAuth(HttpBearer):
    """`Authorization: Bearer udb_...` -> the ApiToken (request.auth); its owner is loaded."""

    # Lets ninja await authenticate() in async views instead of hopping threads for it.
    is_async = True

    async def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        return await sync_to_async(token_authenticate)(token.strip())
