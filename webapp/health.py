"""Liveness/readiness for load balancers and compose: the database and channel layer answer."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection
from django.http import HttpRequest, JsonResponse

logger = logging.getLogger(__name__)


def healthz(request: HttpRequest) -> JsonResponse:
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:  # any driver error means "not ready"; report which part failed
        logger.warning("healthz database check failed", extra={"error": str(exc)})
        checks["database"] = "error"
    try:
        layer = get_channel_layer()
        channel = async_to_sync(layer.new_channel)()
        async_to_sync(layer.send)(channel, {"type": "health.ping"})
        checks["channel_layer"] = "ok"
    except Exception as exc:
        logger.warning("healthz channel layer check failed", extra={"error": str(exc)})
        checks["channel_layer"] = "error"
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "error", **checks}, status=200 if healthy else 503
    )
