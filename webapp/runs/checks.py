"""`manage.py check` refuses configurations that would silently lose live output."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, register

from webapp.runs.run_backends import runner_backend


@register()
def check_runner_channel_layer(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Celery workers are other processes: an in-memory channel layer cannot reach browsers."""
    backend = settings.CHANNEL_LAYERS.get("default", {}).get("BACKEND", "")
    if runner_backend().out_of_process and backend == "channels.layers.InMemoryChannelLayer":
        return [
            Error(
                "UNDOABLE_RUNNER=celery with the in-memory channel layer: output from Celery "
                "workers would never reach the browser.",
                hint="Set REDIS_URL (it configures channels_redis), "
                "or use UNDOABLE_RUNNER=threads.",
                id="queries.E001",
            )
        ]
    return []
