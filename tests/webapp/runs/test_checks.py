"""`manage.py check` refuses Celery with the in-memory channel layer."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

IN_MEMORY = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
REDIS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": ["redis://127.0.0.1:6379/5"]},
    }
}


def test_check_fails_for_celery_with_the_in_memory_layer() -> None:
    with (
        override_settings(UNDOABLE_RUNNER="celery", CHANNEL_LAYERS=IN_MEMORY),
        pytest.raises(SystemCheckError, match="queries.E001"),
    ):
        call_command("check")


def test_check_passes_for_celery_with_redis() -> None:
    with override_settings(UNDOABLE_RUNNER="celery", CHANNEL_LAYERS=REDIS):
        call_command("check")
