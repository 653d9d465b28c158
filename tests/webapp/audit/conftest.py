"""The ledger, fed by the real services: the embedded thread runner, real bwrap sandboxes,
requests through the deployed ASGI application."""

from __future__ import annotations

from tests.webapp.agents.conftest import _fresh_quota, owner, sessions, stranger  # noqa: F401
from tests.webapp.runs.conftest import sandbox_backend, threads_runner  # noqa: F401
from tests.webapp.workspaces.conftest import workspaces_root  # noqa: F401
