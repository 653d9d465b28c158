"""MCP's tests: the agent API's personas, real sandboxes, the embedded runner, workspaces."""

from __future__ import annotations

from tests.webapp.agents.conftest import (  # noqa: F401 (fixtures)
    _fresh_quota,
    owner,
    sessions,
    stranger,
)
from tests.webapp.runs.conftest import sandbox_backend, threads_runner  # noqa: F401
from tests.webapp.workspaces.conftest import workspaces_root  # noqa: F401
