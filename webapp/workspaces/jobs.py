"""The settings every kind's job reads (the job itself: webapp.runs.jobs.KindJob)."""

from __future__ import annotations

from django.conf import settings


def allow_private() -> bool:
    return bool(settings.EXECUTOR_EGRESS_ALLOW_PRIVATE)
