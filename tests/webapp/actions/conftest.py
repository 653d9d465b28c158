"""Actions run for real: the embedded thread runner, real bwrap sandboxes, workspaces under a
folder the sandbox can traverse; requests go through the deployed ASGI application."""

from __future__ import annotations

from tests.webapp.agents.conftest import _fresh_quota, owner, sessions, stranger  # noqa: F401
from tests.webapp.credentials.test_canary import (  # noqa: F401
    celery_worker,
    production_mode,
    redis_monitor,
    redis_url,
)
from tests.webapp.runs.conftest import sandbox_backend, threads_runner  # noqa: F401
from tests.webapp.workspaces.conftest import workspaces_root  # noqa: F401
